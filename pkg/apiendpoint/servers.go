package apiendpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// server is one API server the endpoint knows.
type server struct {
	addr string
	// healthy and failures change under the Endpoint's mu.
	healthy  bool
	failures int
	reported bool               // checked at least once
	cancel   context.CancelFunc // ends its checks

	mu    sync.Mutex
	conns map[*pair]struct{}
}

func (s *server) stop() { s.cancel() }

// closeAll closes every connection through s; their clients reconnect.
func (s *server) closeAll() int {
	s.mu.Lock()
	conns := s.conns
	s.conns = map[*pair]struct{}{}
	s.mu.Unlock()
	for p := range conns {
		p.close()
	}
	return len(conns)
}

// pair is a client's connection and its server connection.
type pair struct {
	client, upstream net.Conn
	once             sync.Once
}

func (p *pair) close() {
	p.once.Do(func() {
		_ = p.client.Close()
		_ = p.upstream.Close()
	})
}

// setServersLocked makes learned (plus the first server) the servers known:
// new ones are checked from now on, those gone have their connections
// closed. It reports whether the set changed.
func (e *Endpoint) setServersLocked(ctx context.Context, learned []string) bool {
	logger := klog.FromContext(ctx)
	learned = slices.Compact(slices.Sorted(slices.Values(learned)))
	if e.order != nil && slices.Equal(learned, e.learned) {
		return false
	}
	want := map[string]bool{e.cfg.Server: true}
	for _, a := range learned {
		want[a] = true
	}
	for a, s := range e.servers {
		if !want[a] {
			s.stop()
			n := s.closeAll()
			delete(e.servers, a)
			logger.Info("API server removed", "server", a, "connectionsClosed", n)
			if e.current == a {
				e.current = ""
			}
		}
	}
	for a := range want {
		if _, ok := e.servers[a]; ok {
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		s := &server{addr: a, cancel: cancel, conns: map[*pair]struct{}{}}
		e.servers[a] = s
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.check(sctx, s)
		}()
	}
	order := slices.Clone(learned)
	e.rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	if !slices.Contains(order, e.cfg.Server) {
		order = append(order, e.cfg.Server)
	}
	e.order, e.learned = order, learned
	return true
}

// check asks s's /readyz until ctx ends: every CheckInterval while it
// answers, at once after a failure until it is marked down.
func (e *Endpoint) check(ctx context.Context, s *server) {
	for ctx.Err() == nil {
		err := e.probe(ctx, s.addr)
		if ctx.Err() != nil {
			return
		}
		if e.report(ctx, s, err) {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.cfg.CheckInterval):
		}
	}
}

// probe asks addr's /readyz, verifying its certificate for the name the
// endpoint's clients verify.
func (e *Endpoint) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// report records a check of s; it says whether to check again at once (a
// failure of a server not yet marked down).
func (e *Endpoint) report(ctx context.Context, s *server, err error) (again bool) {
	logger := klog.FromContext(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.servers[s.addr] != s {
		return false
	}
	if !s.reported {
		s.reported = true
		e.unsettled--
	}
	if err == nil || e.unsettled <= 0 {
		e.settle()
	}
	if err == nil {
		s.failures = 0
		if !s.healthy {
			s.healthy = true
			logger.Info("API server up", "server", s.addr)
		}
		return false
	}
	s.failures++
	if !s.healthy {
		return false
	}
	if s.failures < e.cfg.Failures {
		return true
	}
	e.markDownLocked(logger, s, err)
	return false
}

// markDownLocked takes s out of use and closes its connections.
func (e *Endpoint) markDownLocked(logger klog.Logger, s *server, err error) {
	s.healthy = false
	if e.current == s.addr {
		e.current = ""
	}
	n := s.closeAll()
	logger.Info("API server down, its connections closed", "server", s.addr, "connectionsClosed", n, "err", err.Error())
}

// candidates are the servers to dial for a new connection, best first: the
// pinned one if it is up, else the first up in order (now pinned), then
// the others as a last resort.
func (e *Endpoint) candidates() []*server {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.servers[e.current]; s == nil || !s.healthy {
		e.current = ""
		for _, a := range e.order {
			if e.servers[a].healthy {
				e.current = a
				break
			}
		}
	}
	var out []*server
	if e.current != "" {
		out = append(out, e.servers[e.current])
	}
	for _, a := range e.order {
		if a != e.current {
			out = append(out, e.servers[a])
		}
	}
	return out
}

// serve accepts clients until l closes. Its first accept waits until a
// server answered, or every server was checked once, or a check's time
// passed: a client of a node started with servers that are gone (a stale
// list) is not sent to one of them while another answers.
func (e *Endpoint) serve(ctx context.Context, l net.Listener) {
	select {
	case <-e.settled:
	case <-ctx.Done():
	case <-time.After(e.cfg.CheckTimeout):
	}
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil {
				e.End(fmt.Errorf("node API endpoint: accepting on %s: %w", l.Addr(), err))
			}
			return
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.proxy(ctx, c)
		}()
	}
}

// dial connects to the best server (candidates), marking down one whose
// dial fails, and registers the connection with it: a server marked down
// closes it. done unregisters it.
func (e *Endpoint) dial(ctx context.Context) (up net.Conn, s *server, err error) {
	logger := klog.FromContext(ctx)
	err = errNoServer
	for _, cand := range e.candidates() {
		d := net.Dialer{Timeout: e.cfg.DialTimeout}
		c, derr := d.DialContext(ctx, "tcp", cand.addr)
		if derr != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			e.mu.Lock()
			if e.servers[cand.addr] == cand && cand.healthy {
				e.markDownLocked(logger, cand, derr)
			}
			e.mu.Unlock()
			err = derr
			continue
		}
		return c, cand, nil
	}
	return nil, nil, err
}

// errNoServer is a dial's error when no server is known.
var errNoServer = errors.New("node API endpoint: no API server known")

// proxy connects c to a server and copies both ways until either ends.
func (e *Endpoint) proxy(ctx context.Context, c net.Conn) {
	logger := klog.FromContext(ctx)
	up, s, err := e.dial(ctx)
	if err != nil {
		logger.V(2).Info("No API server reachable, connection refused", "client", c.RemoteAddr().String(), "err", err.Error())
		_ = c.Close()
		return
	}
	p := &pair{client: c, upstream: up}
	s.track(p)
	defer func() {
		s.untrack(p)
		p.close()
	}()
	if ctx.Err() != nil { // stopped before the pair was registered
		return
	}
	// Stop and a server marked down close the pair: both copies end.
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(p.client, p.upstream)
		p.close()
		close(done)
	}()
	_, _ = io.Copy(p.upstream, p.client)
	p.close()
	<-done
}

// track registers p with s: s marked down or removed closes it.
func (s *server) track(p *pair) {
	s.mu.Lock()
	s.conns[p] = struct{}{}
	s.mu.Unlock()
}

func (s *server) untrack(p *pair) {
	s.mu.Lock()
	delete(s.conns, p)
	s.mu.Unlock()
}
