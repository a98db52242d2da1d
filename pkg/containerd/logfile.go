package containerd

import (
	"os"
	"strings"
	"sync"
)

// DefaultLogMaxBytes caps containerd.log; at the cap it becomes
// containerd.log.1 (replacing the one before) and a new file begins, so the
// two take at most twice this on disk.
const DefaultLogMaxBytes = 10 << 20

// tailBytes is how much of containerd's last output is kept in memory, to
// log with its death.
const tailBytes = 2048

// logFile is containerd's stdout and stderr: appended to a file that is
// rotated at a size cap, with the last lines kept for the death message.
type logFile struct {
	path string
	max  int64

	mu   sync.Mutex
	f    *os.File
	size int64
	tail []byte
}

func openLog(path string, max int64) (*logFile, error) {
	l := &logFile{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write implements io.Writer. It never fails: a log that cannot be
// written must not stop containerd (whose output pipe would fill).
func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail = append(l.tail, p...)
	if len(l.tail) > tailBytes {
		l.tail = append([]byte(nil), l.tail[len(l.tail)-tailBytes:]...)
	}
	if l.f != nil && l.max > 0 && l.size+int64(len(p)) > l.max && l.size > 0 {
		_ = l.f.Close()
		l.f = nil
		_ = os.Rename(l.path, l.path+".1")
		_ = l.open()
	}
	if l.f == nil {
		return len(p), nil
	}
	n, _ := l.f.Write(p)
	l.size += int64(n)
	return len(p), nil
}

// Tail is the last lines containerd wrote (at most tailBytes, from a line
// start).
func (l *logFile) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := string(l.tail)
	if len(l.tail) == tailBytes {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimRight(s, "\n")
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
