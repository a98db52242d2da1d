package bootstrap

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Connection caps of the API port, per profile. Each open connection costs
// the server ~22 KiB even when idle (TLS state, buffers, goroutines), and
// upstream's server has no cap of its own: only the open-files limit stops a
// client that opens thousands (docs/reliability/load.md). The in-process
// clients (controllers, scheduler, loopback) use a few dozen.
const (
	defaultMaxConnections = 4096
	smallMaxConnections   = 1024
	// keepAlivePeriod is upstream's for the API port's TCP keep-alives
	// (the wrapper hides *net.TCPConn from upstream's own listener wrapper).
	keepAlivePeriod = 3 * time.Minute
	// refusedLogEvery rate-limits the warning about refused connections.
	refusedLogEvery = time.Minute
)

// connLimitListener closes new connections at once while max are open, so a
// flood of idle or slow connections costs bounded memory. Refused clients see
// the connection closed and can retry; open connections are not disturbed.
type connLimitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
	logger  klog.Logger
	lastLog atomic.Int64 // unix nanoseconds of the last warning
}

func limitConnections(l net.Listener, max int, logger klog.Logger) net.Listener {
	if max <= 0 {
		return l
	}
	return &connLimitListener{Listener: l, max: int64(max), logger: logger}
}

// Accept returns the next connection under the cap. Errors are only the
// underlying listener's: upstream's server stops serving on any other.
func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			l.noteRefused()
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetKeepAlive(true)
			_ = tc.SetKeepAlivePeriod(keepAlivePeriod)
		}
		return &limitedConn{Conn: c, release: func() { l.open.Add(-1) }}, nil
	}
}

func (l *connLimitListener) noteRefused() {
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(refusedLogEvery) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	l.logger.Info("Too many open connections to the API port: closing new ones", "max", l.max, "refusedSoFar", n)
}

// limitedConn gives its slot back once, however often it is closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
