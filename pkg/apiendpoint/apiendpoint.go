// Package apiendpoint is a node's local API endpoint: a TCP proxy on
// 127.0.0.1 through which the node's components reach the API servers. It
// knows every server (the --server given at join first, then the addresses
// of the `kubernetes` Service's EndpointSlice, watched and kept on disk for
// the next start), checks each server's /readyz, pins new connections to one
// healthy server and, when a server stops answering, closes every
// connection through it so that its clients (client-go watches) reconnect
// to a live one.
//
// TLS passes through untouched: clients verify the server's certificate
// for the name they dial, 127.0.0.1, which every server's serving
// certificate covers (pkg/certs servingSANs); the health checks verify the
// same name against the cluster CA.
//
// Why pin and not spread: a node's clients share few long-lived HTTP/2
// connections, and each connection carries many watches, so spreading per
// connection balances little; pinning keeps a node's watches on one server,
// so a server's death is one failover for the node, not one per component.
// Nodes spread over servers because each node orders them at random.
package apiendpoint

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
)

// DefaultPort is the endpoint's port on 127.0.0.1: beside the API
// servers' 6443, as k3s's agent load balancer uses it.
const DefaultPort = 6444

// Config is what an Endpoint needs.
type Config struct {
	// Listen is the local address, host:port; "" is 127.0.0.1:DefaultPort.
	Listen string
	// DialOnly: no listener; an in-process client (pkg/apicache, which
	// listens on Listen itself) connects through DialContext.
	DialOnly bool
	// Server is the first server to contact, host:port (the join's
	// --server): it is used until the Service's endpoints are known and
	// stays a last resort when it is not one of them.
	Server string
	// StateFile keeps the servers learned (<node dir>/api-servers.json).
	StateFile string
	// CAFile is the cluster CA the health checks verify servers against.
	CAFile string
	// ServerName is the name the health checks verify, the one the
	// endpoint's clients verify; "" is Listen's host.
	ServerName string
	// Kubeconfig is the client the endpoint watches the Service's
	// EndpointSlice with (the node's own, through the endpoint itself);
	// "" watches nothing and keeps the servers it started with.
	Kubeconfig string
	// CheckInterval is how often each server's /readyz is asked (1s);
	// CheckTimeout bounds each check (2s); Failures in a row mark a server
	// down (2): the next check after a failure is made at once.
	CheckInterval, CheckTimeout time.Duration
	Failures                    int
	// DialTimeout bounds a dial to a server (3s).
	DialTimeout time.Duration
}

// complete fills in the defaults and checks c.
func (c *Config) complete() error {
	if c.Listen == "" {
		c.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultPort))
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("node API endpoint: listen address %q: %w", c.Listen, err)
	}
	if c.ServerName == "" {
		c.ServerName = host
	}
	if err := validAddress(c.Server); err != nil {
		return fmt.Errorf("node API endpoint: server: %w", err)
	}
	if c.CAFile == "" {
		return errors.New("node API endpoint: no cluster CA file")
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = time.Second
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 2 * time.Second
	}
	if c.Failures <= 0 {
		c.Failures = 2
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * time.Second
	}
	return nil
}

// validAddress checks that a is host:port with a numeric port.
func validAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("address %q: %w", a, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 || host == "" {
		return fmt.Errorf("address %q: want host:port", a)
	}
	return nil
}

// Endpoint is the node-local API endpoint, a component.
type Endpoint struct {
	component.Status
	cfg    Config
	client *http.Client

	mu      sync.Mutex
	servers map[string]*server
	// order is the preference: the learned servers in this node's random
	// order, then the first server unless it is one of them.
	order   []string
	learned []string // sorted, as last persisted
	saved   []byte   // the state file's content as last written or read
	current string   // the server new connections are pinned to
	// settled is closed once a server answered or every server known at
	// start was checked once (unsettled counts those not yet checked).
	settled    chan struct{}
	settleOnce sync.Once
	unsettled  int
	rand       *rand.Rand

	listener net.Listener
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	watch    func(ctx context.Context) error
}

// New checks cfg and builds an Endpoint; nothing runs until Start.
func New(cfg Config) (*Endpoint, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("node API endpoint: cluster CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("node API endpoint: cluster CA %s holds no PEM certificate", cfg.CAFile)
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12},
		DialContext:         (&net.Dialer{Timeout: cfg.DialTimeout}).DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     2 * cfg.CheckInterval,
	}
	e := &Endpoint{
		cfg:     cfg,
		client:  &http.Client{Transport: tr},
		servers: map[string]*server{},
		rand:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		settled: make(chan struct{}),
	}
	if cfg.Kubeconfig != "" {
		e.watch = e.watchSlice
	}
	return e, nil
}

// Listen listens on addr (host:port) for the node's parts, with an error
// that says what to do when another process holds the port.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("node API endpoint: %s is taken by another process: stop it, or give the endpoint another port (--lb-server-port): %w", addr, err)
		}
		return nil, fmt.Errorf("node API endpoint: listening on %s: %w", addr, err)
	}
	return l, nil
}

// Name is the component's name.
func (e *Endpoint) Name() string { return "api-endpoint" }

// Address is where the endpoint listens, once started.
func (e *Endpoint) Address() string {
	if e.listener == nil {
		return e.cfg.Listen
	}
	return e.listener.Addr().String()
}

// Start listens and begins checking the servers it knows: --server and
// those kept on disk.
func (e *Endpoint) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("api-endpoint")
	var l net.Listener
	if !e.cfg.DialOnly {
		var err error
		if l, err = Listen(e.cfg.Listen); err != nil {
			return err
		}
		e.listener = l
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logger))
	e.cancel = cancel
	e.mu.Lock()
	e.setServersLocked(runCtx, e.load(logger))
	e.unsettled = len(e.servers)
	e.mu.Unlock()
	if l != nil {
		logger.Info("Serving the API locally", "address", l.Addr().String(), "servers", e.Servers())
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.serve(runCtx, l)
		}()
	} else {
		logger.Info("Following the API servers", "servers", e.Servers())
	}
	if e.watch != nil {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			if err := e.watch(runCtx); err != nil && runCtx.Err() == nil {
				e.End(err)
			}
		}()
	}
	e.MarkReady()
	return nil
}

// Ready is nil once the endpoint listens: a node whose servers are all
// unreachable still has its endpoint.
func (e *Endpoint) Ready(ctx context.Context) error { return e.WaitReady(ctx) }

// Stop closes the listener and every connection, and waits for the checks.
func (e *Endpoint) Stop(ctx context.Context) error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	if e.listener != nil {
		_ = e.listener.Close()
	}
	e.mu.Lock()
	for _, s := range e.servers {
		s.stop()
		s.closeAll()
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Servers are the servers known, in this node's order of preference.
func (e *Endpoint) Servers() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.order...)
}

// Up are the servers whose last check passed, in order of preference.
func (e *Endpoint) Up() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var up []string
	for _, a := range e.order {
		if e.servers[a].healthy {
			up = append(up, a)
		}
	}
	return up
}

func (e *Endpoint) settle() { e.settleOnce.Do(func() { close(e.settled) }) }

// Current is the server new connections go to ("" when none is known up).
func (e *Endpoint) Current() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current
}
