// Package testlink is a TCP relay standing for the network path to a server
// in tests: cut, it goes silent the way a link or a host that dies does.
package testlink

import (
	"net"
	"sync"
	"testing"
)

// Link is a TCP relay standing for the network path to one server: cut, it
// goes silent the way a link or a host that dies does (no FIN, no RST):
// bytes in flight stop, new connections are accepted and never answered.
type Link struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   chan struct{} // closed while cut
	conns []net.Conn
}

// New relays to target until the test ends.
func New(t testing.TB, target string) *Link {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &Link{l: l, target: target, cut: make(chan struct{})}
	t.Cleanup(func() {
		_ = l.Close()
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, c := range k.conns {
			_ = c.Close()
		}
	})
	go k.accept()
	return k
}

// Addr is the relay's address.
func (k *Link) Addr() string { return k.l.Addr().String() }

// Cut silences the link; Heal lets new connections through again
// (connections made before the cut stay silent).
func (k *Link) Cut() {
	k.mu.Lock()
	defer k.mu.Unlock()
	close(k.cut)
}

// Heal ends a cut.
func (k *Link) Heal() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cut = make(chan struct{})
}

func (k *Link) state() (cut chan struct{}, isCut bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-k.cut:
		return k.cut, true
	default:
		return k.cut, false
	}
}

func (k *Link) keep(c net.Conn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.conns = append(k.conns, c)
}

func (k *Link) accept() {
	for {
		c, err := k.l.Accept()
		if err != nil {
			return
		}
		k.keep(c)
		cut, isCut := k.state()
		if isCut {
			continue // held open, never answered
		}
		up, err := net.Dial("tcp", k.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		k.keep(up)
		go k.pipe(c, up, cut)
		go k.pipe(up, c, cut)
	}
}

// pipe copies from src to dst until either closes or the link is cut; then
// it stops reading, and holds both ends open.
func (k *Link) pipe(src, dst net.Conn, cut chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-cut:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}
