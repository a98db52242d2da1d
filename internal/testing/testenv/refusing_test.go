package testenv

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefusingAddr: connecting is refused, and no listener can take the
// port while the test runs.
func TestRefusingAddr(t *testing.T) {
	addr := RefusingAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want it refused", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("listening on %s succeeded while it is held", addr)
	}
}
