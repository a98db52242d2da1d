// Package apicache is an agent's API cache: the node-local API endpoint
// its parts (kubelet, flannel, kube-proxy, NetworkPolicy, local storage)
// reach the API servers through, which keeps what they read on the node's
// disk and serves it to them when no server answers, so that a node keeps
// running its pods offline, and starts them again after a restart with the
// link still down.
//
// It terminates TLS on 127.0.0.1 (a serving certificate from a CA made at
// each start, whose key never leaves memory), accepts only the node's own
// client certificate, and forwards each request to the server the node's
// endpoint (pkg/apiendpoint) pins, with the node's client certificate: the
// parts' identity is the node's already. Reads are asked for as JSON and
// kept:
//
//   - a list or watch, by path and selectors: the objects a LIST returned,
//     or a watch's initial events, then every event of its watches;
//   - a get, by object;
//   - a service account token request, by service account and request,
//     served while the token is valid.
//
// Kept are the node's reads but Leases, Events and reviews; objects
// without metadata.managedFields. The cache is bounded (Config.MaxBytes)
// and written to disk only when something changed, at most once per
// Config.FlushInterval, as an append-only journal (journal.go).
//
// When no server answers (the endpoint's health checks) or a request to
// one fails, reads are answered from the cache: a list as a list, a watch
// as its initial events if asked for, then held open until a server answers
// again (then ended, so that clients watch the servers again); what the
// cache does not hold, and writes, get 503. The kubelet's own pod status
// updates are applied to the cache (writeback.go): its pods' new addresses
// reach kube-proxy's EndpointSlices and the NetworkPolicy controller's
// pods, so Services between the node's pods keep answering after a
// restart. A server that answers again gets the kubelet's statuses from the
// kubelet itself, which reconciles them with what the server holds.
package apicache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
)

// DirName is the cache's directory in the node's directory.
const DirName = "api-cache"

// localCAFile is the CA of the cache's serving certificate, in its
// directory: the node's parts' kubeconfig names it.
const localCAFile = "local-ca.crt"

// LocalCAFile is the CA file the node's parts trust the cache with.
func LocalCAFile(dir string) string { return filepath.Join(dir, localCAFile) }

// Upstream is how the cache reaches the servers: the node's endpoint.
type Upstream interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	// Settled is closed once whether a server answers is known.
	Settled() <-chan struct{}
	// Online tells whether a server answers.
	Online() bool
}

// Config is what a Cache needs.
type Config struct {
	// Node is the node's name: only its client certificate is accepted.
	Node string
	// Listen is the local address, host:port.
	Listen string
	// Dir holds the journal and the local CA (mode 0700).
	Dir string
	// ClientCAFile is the CA of the node's client certificate.
	ClientCAFile string
	// ServerCAFile is the cluster CA the servers' certificates chain to,
	// and ServerName the name verified (127.0.0.1, as the node's clients
	// verify it).
	ServerCAFile, ServerName string
	// CertFile is the node's current client certificate and key (one PEM
	// file, the kubelet's kubelet-client-current.pem).
	CertFile string
	Upstream Upstream
	// MaxBytes bounds the objects and tokens kept (DefaultMaxBytes).
	MaxBytes int64
	// FlushInterval is how long changes wait in memory before they are
	// written, together (DefaultFlushInterval).
	FlushInterval time.Duration
	// CheckInterval is how often the upstream's state is read (500ms).
	CheckInterval time.Duration
}

// Defaults: a node's objects are a few MiB; 10 s of changes lost on a
// power cut cost a node nothing (a cache, refreshed when a server answers).
const (
	DefaultMaxBytes      = 32 << 20
	DefaultFlushInterval = 10 * time.Second
)

// Cache is the node's API cache, a component.
type Cache struct {
	component.Status
	cfg       Config
	store     *store
	transport *http.Transport
	srv       *http.Server
	listener  net.Listener
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu sync.Mutex
	// online is the mode; back is closed (and replaced) when a server
	// answers again, ending the watches held offline.
	online  bool
	back    chan struct{}
	watches map[*heldWatch]bool
	pages   map[string]*pagedList
	started time.Time
}

// New checks cfg; nothing runs until Start.
func New(cfg Config) (*Cache, error) {
	if cfg.Node == "" || cfg.Listen == "" || cfg.Dir == "" || cfg.CertFile == "" || cfg.Upstream == nil {
		return nil, errors.New("api cache: a node, a listen address, a directory, a certificate and an upstream are required")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultFlushInterval
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 500 * time.Millisecond
	}
	if cfg.ServerName == "" {
		cfg.ServerName = "127.0.0.1"
	}
	serverCAs, err := readPool(cfg.ServerCAFile)
	if err != nil {
		return nil, fmt.Errorf("api cache: cluster CA: %w", err)
	}
	nc := &nodeCert{path: cfg.CertFile}
	tr := &http.Transport{
		DialContext: cfg.Upstream.DialContext,
		TLSClientConfig: &tls.Config{
			RootCAs: serverCAs, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12,
			GetClientCertificate: nc.get,
		},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &Cache{cfg: cfg, transport: tr, back: make(chan struct{}), watches: map[*heldWatch]bool{}, pages: map[string]*pagedList{}}, nil
}

// Name is the component's name.
func (c *Cache) Name() string { return "api-cache" }

// Start loads the cache, writes the local CA and listens.
func (c *Cache) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("api-cache")
	c.started = time.Now()
	clientCAs, err := readPool(c.cfg.ClientCAFile)
	if err != nil {
		return fmt.Errorf("api cache: client CA: %w", err)
	}
	if c.store, err = openStore(logger, c.cfg.Dir, c.cfg.MaxBytes); err != nil {
		return err
	}
	serving, caPEM, err := localTLS(c.cfg.Node)
	if err != nil {
		return fmt.Errorf("api cache: serving certificate: %w", err)
	}
	if err := os.WriteFile(LocalCAFile(c.cfg.Dir), caPEM, 0o644); err != nil {
		return fmt.Errorf("api cache: %w", err)
	}
	l, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		return fmt.Errorf("api cache: listening on %s (is another process on it? --lb-server-port moves it): %w", c.cfg.Listen, err)
	}
	c.listener = l
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	c.cancel = cancel
	c.srv = &http.Server{
		Handler:           c,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return runCtx },
		ErrorLog:          nil,
		TLSConfig: &tls.Config{
			Certificates:          []tls.Certificate{serving},
			ClientAuth:            tls.RequireAnyClientCert,
			VerifyPeerCertificate: verifyNode(clientCAs, c.cfg.Node),
			MinVersion:            tls.VersionTLS12,
			NextProtos:            []string{"h2", "http/1.1"},
		},
	}
	held, _ := c.store.stats()
	logger.Info("Serving the API locally, kept on the node's disk", "address", l.Addr().String(), "dir", c.cfg.Dir, "cachedBytes", held)
	c.wg.Add(3)
	go func() {
		defer c.wg.Done()
		if err := c.srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.End(fmt.Errorf("api cache: serving on %s: %w", l.Addr(), err))
		}
	}()
	go func() {
		defer c.wg.Done()
		c.follow(runCtx)
	}()
	go func() {
		defer c.wg.Done()
		c.flushLoop(runCtx)
	}()
	c.MarkReady()
	return nil
}

// Ready is nil once the cache listens.
func (c *Cache) Ready(ctx context.Context) error { return c.WaitReady(ctx) }

// Stop ends every request, writes what changed and closes the journal.
func (c *Cache) Stop(ctx context.Context) error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	_ = c.srv.Close()
	c.transport.CloseIdleConnections()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := c.store.close()
	held, written := c.store.stats()
	klog.FromContext(ctx).Info("Node API cache stopped", "cachedBytes", held, "writtenBytes", written, "since", c.started.Format(time.RFC3339))
	return err
}

// Address is where the cache listens, once started.
func (c *Cache) Address() string {
	if c.listener == nil {
		return c.cfg.Listen
	}
	return c.listener.Addr().String()
}

// Online tells whether the cache forwards (a server answers).
func (c *Cache) Online() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.online
}

// Stats are the bytes the cache holds and has written to disk since it
// started.
func (c *Cache) Stats() (held, written int64) { return c.store.stats() }

// follow tracks whether a server answers: going offline and coming back are
// logged once each; coming back ends the watches held offline.
func (c *Cache) follow(ctx context.Context) {
	logger := klog.FromContext(ctx)
	select {
	case <-c.cfg.Upstream.Settled():
	case <-ctx.Done():
		return
	}
	first := true
	t := time.NewTicker(c.cfg.CheckInterval)
	defer t.Stop()
	for {
		up := c.cfg.Upstream.Online()
		c.mu.Lock()
		changed := first || up != c.online
		c.online = up
		var back chan struct{}
		if changed && up && !first {
			back, c.back = c.back, make(chan struct{})
		}
		c.mu.Unlock()
		switch {
		case changed && !up:
			held, _ := c.store.stats()
			logger.Info("No API server answers: serving the node's parts from the node's cache", "cachedBytes", held)
		case back != nil:
			close(back)
			logger.Info("An API server answers again: forwarding, watches held offline ended")
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// flushLoop writes the cache's changes every FlushInterval.
func (c *Cache) flushLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(c.cfg.FlushInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.store.flush(); err != nil {
			if !failing {
				logger.Error(err, "Writing the node's API cache failed: it is kept in memory and written again")
			}
			failing = true
			continue
		}
		failing = false
	}
}

// state is the mode and the channel that closes when a server answers
// again.
func (c *Cache) state() (online bool, back <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.online, c.back
}
