package bootstrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// InUseError says a running server holds the data dir lock.
type InUseError struct {
	Dir string
	PID string // "unknown" when the lock file holds none
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("data dir %s is in use by another edgeplane server or agent (pid %s): stop it or pass another --data-dir", e.Dir, e.PID)
}

// lockDir takes the exclusive lock on <dir>/edgeplane.lock and writes our pid
// into it. The kernel drops the lock when the process dies.
func lockDir(dir string) (*dataDirLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, unwrapPath(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, PID: pidOrUnknown(holder)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dataDirLock{f: f}, nil
}

// LockDataDir takes the lock a server holds on an existing data dir while it
// runs, for commands that must not run next to a server (snapshot restore)
// or that work differently when one runs. A running server yields an
// *InUseError. release drops the lock.
func LockDataDir(dir string) (release func(), err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, unwrapPath(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("data dir %s is not a directory", dir)
	}
	l, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	return l.release, nil
}
