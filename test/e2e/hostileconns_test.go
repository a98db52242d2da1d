package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// hostileConn is one attacking connection and when the server closed it.
type hostileConn struct {
	kind   string
	conn   net.Conn
	opened time.Time
	closed atomic.Int64 // unix nanoseconds; 0 while open
}

// hostileConnections holds thousands of connections open against the
// server: slowloris (TLS, HTTP/1.1 headers one byte a second), idle plain
// TCP (no TLS handshake), idle TLS after the handshake (HTTP/1.1) and idle
// HTTP/2 after the preface. A normal admin client on fresh connections must
// be served meanwhile; the server must close every one of them by itself and
// give back its file descriptors. The idle HTTP/2 connections live 90 s (the
// http2 server's IdleTimeout): the CI form opens fewer, and closes them
// itself after the others are gone, then checks that the server let go of
// them; the full form waits for the server to close them.
func hostileConnections(t *testing.T, s *server, rss *procfs.Sampler) {
	t.Run("slow headers and idle connections", func(t *testing.T) {
		type size struct {
			kind     string
			n        int
			bound    time.Duration // the server must have closed them by then
			byClient bool          // CI form: the client closes them (see above)
		}
		sizes := []size{
			// ReadHeaderTimeout (32 s upstream) bounds the TLS handshake and the first request's headers.
			{kind: "slowloris", n: 200, bound: 45 * time.Second},
			{kind: "idle-tcp", n: 1500, bound: 45 * time.Second},
			{kind: "idle-tls", n: 1000, bound: 45 * time.Second},
			{kind: "idle-h2", n: 300, bound: 45 * time.Second, byClient: true},
		}
		if loadFull() {
			// Just under the default profile's cap of 4096 open connections
			// (pkg/bootstrap/connlimit.go; beyond it the server closes new
			// ones at once, tested in its unit test): 11,500 connections
			// before the cap took RSS to 581-614 MiB.
			sizes[0].n, sizes[1].n, sizes[2].n = 1000, 1500, 1000
			// HTTP/2 after the preface: the http2 server's IdleTimeout (90 s upstream).
			sizes[3] = size{kind: "idle-h2", n: 400, bound: 120 * time.Second}
		}
		byClient := map[string]bool{}
		for _, sz := range sizes {
			byClient[sz.kind] = sz.byClient
		}
		pid := s.cmd.Process.Pid
		ours := hostileRaiseNofile(t)
		theirs := hostileNofile(t, pid)
		total := 0
		for _, sz := range sizes {
			total += sz.n
		}
		if limit := min(ours, theirs) - 2000; total > limit {
			t.Fatalf("%d connections need more file descriptors than the limits allow (ours %d, server's %d)", total, ours, theirs)
		}
		addr := strings.TrimPrefix(s.config.Host, "https://")
		anon, err := hostileTLSConfig(s, false)
		if err != nil {
			t.Fatal(err)
		}
		fdsBefore, rssBefore := hostileFDs(pid), rss.Current()
		ctx, cancel := context.WithCancel(context.Background())
		var conns []*hostileConn
		defer func() {
			cancel()
			for _, c := range conns {
				_ = c.conn.Close()
			}
		}()
		opening := time.Now()
		for _, sz := range sizes {
			conns = append(conns, hostileOpen(ctx, t, addr, anon, sz.kind, sz.n)...)
		}
		t.Logf("opened %d connections in %s (server fds %d -> %d)", len(conns), time.Since(opening).Round(time.Millisecond), fdsBefore, hostileFDs(pid))

		// A normal client, on a new connection each time, while the attack lasts.
		admin, err := hostileTLSConfig(s, true)
		if err != nil {
			t.Fatal(err)
		}
		normal := &http.Client{Transport: &http.Transport{TLSClientConfig: admin, ForceAttemptHTTP2: true, DisableKeepAlives: true}, Timeout: 30 * time.Second}
		var lat []time.Duration
		fdsPeak := 0
		var bound time.Duration
		for _, sz := range sizes {
			bound = max(bound, sz.bound)
		}
		deadline := opening.Add(bound)
		for i := 0; time.Now().Before(deadline) && hostileOpenCount(conns, byClient) > 0; i++ {
			fdsPeak = max(fdsPeak, hostileFDs(pid))
			start := time.Now()
			method, url, body := "GET", s.config.Host+"/api/v1/namespaces/default/configmaps?limit=1", []byte(nil)
			if i%4 == 0 {
				method, url = "POST", s.config.Host+"/api/v1/namespaces/default/configmaps"
				body = hostileConfigMapJSON(fmt.Sprintf("during-attack-%d", i), "v")
			}
			code := hostileDo(t, normal, method, url, "application/json", body)
			lat = append(lat, time.Since(start))
			if code != 200 && code != 201 {
				t.Errorf("normal client during the attack: %s %s = %d", method, url, code)
			}
			time.Sleep(250 * time.Millisecond)
		}
		rssDuring := rss.Peak()
		slices.Sort(lat)
		p := func(q float64) time.Duration {
			return lat[min(len(lat)-1, int(q*float64(len(lat))))].Round(time.Millisecond)
		}
		t.Logf("normal client during the attack: %d requests on fresh connections, p50 %s, p99 %s, max %s", len(lat), p(0.5), p(0.99), lat[len(lat)-1].Round(time.Millisecond))
		if lat[len(lat)-1] > 10*time.Second {
			t.Errorf("a normal request took %s during the attack, want under 10 s", lat[len(lat)-1])
		}

		// How long each kind lived.
		for _, sz := range sizes {
			var lived []time.Duration
			open := 0
			for _, c := range conns {
				if c.kind != sz.kind {
					continue
				}
				if at := c.closed.Load(); at != 0 {
					lived = append(lived, time.Unix(0, at).Sub(c.opened))
				} else {
					open++
				}
			}
			slices.Sort(lived)
			if len(lived) > 0 {
				t.Logf("%s: %d connections, server closed %d after %s (min) / %s (median) / %s (max); %d still open",
					sz.kind, sz.n, len(lived), lived[0].Round(time.Millisecond), lived[len(lived)/2].Round(time.Millisecond), lived[len(lived)-1].Round(time.Millisecond), open)
			}
			switch {
			case sz.byClient:
				if len(lived) > 0 {
					t.Errorf("%s: the server closed %d of %d connections within %s; none expected before its 90 s idle timeout", sz.kind, len(lived), sz.n, sz.bound)
				}
				t.Logf("%s: %d connections open through the attack; the client closes them now", sz.kind, open)
				for _, c := range conns {
					if c.kind == sz.kind {
						_ = c.conn.Close()
					}
				}
			case open > 0:
				t.Errorf("%s: %d of %d connections still open %s after they were opened: the server does not close them", sz.kind, open, sz.n, sz.bound)
			}
		}
		// The server gave back its descriptors.
		var fdsAfter int
		eventually(t, 30*time.Second, "the server to release the attack's file descriptors", func(context.Context) (bool, error) {
			fdsAfter = hostileFDs(pid)
			return fdsAfter < fdsBefore+100, fmt.Errorf("%d fds, %d before", fdsAfter, fdsBefore)
		})
		t.Logf("server fds: before %d, peak %d, after %d; RSS: before %d MiB, peak %d MiB, after %d MiB",
			fdsBefore, fdsPeak, fdsAfter, rssBefore>>20, rssDuring>>20, rss.Current()>>20)
		hostileAfter(t, s, rss)
	})
}

// hostileOpen opens n connections of a kind, 16 at a time, each watched by
// a reader that records when the server closes it.
func hostileOpen(ctx context.Context, t *testing.T, addr string, base *tls.Config, kind string, n int) []*hostileConn {
	t.Helper()
	conns := make([]*hostileConn, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := hostileDial(addr, base, kind)
			if err != nil {
				errs <- fmt.Errorf("%s #%d: %w", kind, i, err)
				return
			}
			hc := &hostileConn{kind: kind, conn: c, opened: time.Now()}
			conns[i] = hc
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						hc.closed.Store(time.Now().UnixNano())
						return
					}
				}
			}()
			if kind == "slowloris" {
				go func() {
					tk := time.NewTicker(time.Second)
					defer tk.Stop()
					for hc.closed.Load() == 0 {
						select {
						case <-ctx.Done():
							return
						case <-tk.C:
						}
						if _, err := c.Write([]byte("a")); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("open attack connection: %v", err)
	}
	return conns
}

func hostileDial(addr string, base *tls.Config, kind string) (net.Conn, error) {
	raw, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil || kind == "idle-tcp" {
		return raw, err
	}
	cfg := base.Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	cfg.NextProtos = []string{"http/1.1"}
	if kind == "idle-h2" {
		cfg.NextProtos = []string{"h2"}
	}
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := c.Handshake(); err != nil {
		_ = raw.Close()
		return nil, err
	}
	switch kind {
	case "slowloris":
		_, err = c.Write([]byte("GET /api/v1/namespaces HTTP/1.1\r\nHost: edgeplane\r\nX-Slow: "))
	case "idle-h2":
		// The client preface and an empty SETTINGS frame, then nothing.
		_, err = c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0))
	}
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// hostileOpenCount counts the open connections the server is to close (not
// those of the kinds in byClient).
func hostileOpenCount(conns []*hostileConn, byClient map[string]bool) int {
	n := 0
	for _, c := range conns {
		if c.closed.Load() == 0 && !byClient[c.kind] {
			n++
		}
	}
	return n
}

// hostileRaiseNofile lifts the test's soft RLIMIT_NOFILE to the hard limit
// and returns it.
func hostileRaiseNofile(t *testing.T) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	return int(min(lim.Cur, 1<<30))
}

// hostileNofile is the server's soft open-files limit from /proc/<pid>/limits.
func hostileNofile(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if n, err := strconv.Atoi(f[0]); err == nil {
					return n
				}
				return 1 << 30 // unlimited
			}
		}
	}
	t.Fatalf("no open-files limit in /proc/%d/limits", pid)
	return 0
}

// hostileFDs counts the server's open file descriptors.
func hostileFDs(pid int) int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(entries)
}
