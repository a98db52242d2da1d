package apiendpoint

import (
	"context"
	"net"
	"sync"
)

// DialContext connects an in-process client (pkg/apicache) to the server
// new connections are pinned to, as the endpoint's listener connects its
// clients: the first accepted dial waits until the servers are settled, and
// a server marked down closes every connection dialled to it, so that the
// client's requests and watches on it end and are retried on a live one.
// network and addr are ignored: the endpoint picks the server.
func (e *Endpoint) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	select {
	case <-e.settled:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	up, s, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: up}
	p := &pair{client: c, upstream: up}
	c.release = func() { s.untrack(p) }
	s.track(p)
	return c, nil
}

// Settled is closed once a server answered or every server known at start
// was checked once: until then, whether the node is offline is not known.
func (e *Endpoint) Settled() <-chan struct{} { return e.settled }

// Online tells whether a server's last health check passed.
func (e *Endpoint) Online() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.servers {
		if s.healthy {
			return true
		}
	}
	return false
}

// trackedConn is a dialled connection that leaves its server's set when
// closed.
type trackedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
