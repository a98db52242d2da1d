package bootstrap

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// TestConnLimitListener opens real loopback connections past the cap: the
// extra ones are closed at once, open ones keep working, and a closed one
// frees its slot.
func TestConnLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := limitConnections(raw, 2, klog.Background())
	defer l.Close()
	// An echo server on the limited listener.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()

	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	echoes := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		buf := make([]byte, 1)
		_, err := io.ReadFull(c, buf)
		return err
	}

	a, b := dial(), dial()
	for name, c := range map[string]net.Conn{"first": a, "second": b} {
		if err := echoes(c); err != nil {
			t.Fatalf("%s connection under the cap: %v", name, err)
		}
	}
	over := dial()
	if err := echoes(over); err == nil {
		t.Fatal("a third connection over a cap of 2 was served")
	} else if !closedByPeer(err) {
		t.Fatalf("the connection over the cap should be closed by the server (EOF or a reset), got %v", err)
	}
	if err := echoes(a); err != nil {
		t.Fatalf("an open connection stopped working after a refusal: %v", err)
	}

	_ = b.Close()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = echoes(dial())
		return last == nil, nil
	}); err != nil {
		t.Fatalf("closing a connection did not free its slot within a minute (last: %v)", last)
	}
	if got := l.(*connLimitListener).refused.Load(); got < 1 {
		t.Fatalf("refused = %d, want at least 1", got)
	}
}

// closedByPeer tells whether err is the server closing the connection: an EOF
// on read or a reset (a write to a connection it closed), and not, for
// instance, the client's own deadline running out.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
