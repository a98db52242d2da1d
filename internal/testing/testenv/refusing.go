package testenv

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusingAddr is a loopback "host:port" that refuses every connection for
// the rest of the test. A listener opened and closed to find a dead port is
// not enough: the kernel can hand that port to the next listener at once
// (another server of the same test, or of a test running beside it), and
// the "dead" address then answers. Here a TCP socket stays bound to the
// port without listening, so nobody else can take it and connecting gets
// ECONNREFUSED.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("RefusingAddr: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("RefusingAddr: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("RefusingAddr: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("RefusingAddr: bound to %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
