package bootstrap

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

const lockName = "edgeplane.lock"

// dataDirLock is an exclusive advisory lock on the data dir, so that two
// servers never share one datastore. The kernel drops it if the process dies.
type dataDirLock struct{ f *os.File }

// prepareDataDir creates the data dir 0700, proves it writable and locks it.
func prepareDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s cannot be created: %w", dir, unwrapPath(err))
	}
	probe, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return nil, fmt.Errorf("data dir %s is not writable (%v): fix its owner or mode, or pass another --data-dir", dir, unwrapPath(err))
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, unwrapPath(err))
	}

	return lockDir(dir)
}

// release drops the lock; safe to call more than once.
func (l *dataDirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Close()
	l.f = nil
}

func pidOrUnknown(b []byte) string {
	if pid, err := strconv.Atoi(string(bytes.TrimSpace(b))); err == nil {
		return strconv.Itoa(pid)
	}
	return "unknown"
}

// unwrapPath drops the *PathError wrapper so the message is not "path: path: cause".
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// listen binds the API port first thing, so a port in use fails before any
// state is touched.
func listen(ip net.IP, port int) (net.Listener, error) {
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("port %d on %s is already in use (another edgeplane or kube-apiserver?): stop it or pass --https-port", port, ip)
		}
		if errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("listen on %s: permission denied: use a port above 1023 or run as root", addr)
		}
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}
