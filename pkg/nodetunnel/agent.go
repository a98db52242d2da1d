package nodetunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/component"
)

// AgentName is the node part's name (and its --disable name).
const AgentName = "node-tunnel"

// Defaults of AgentOptions.
const (
	DefaultServerName  = "127.0.0.1"
	minBackoff         = time.Second
	maxBackoff         = 30 * time.Second
	resyncServers      = 10 * time.Second
	kubeletDialTimeout = 5 * time.Second
)

// AgentOptions configure a node's end of its tunnels.
type AgentOptions struct {
	// Mode is sent to the servers (ModeAuto or ModeAlways).
	Mode Mode
	// Servers are the servers (host:port) to keep a tunnel to, asked again
	// every 10 s: every server, so that whichever serves a request can
	// reach the node.
	Servers func() []string
	// CAFile verifies the servers; ServerName is the name verified
	// (default DefaultServerName, which every server's certificate has).
	CAFile, ServerName string
	// CertFile and KeyFile are the node's client certificate and key, read
	// at each connect (the kubelet rotates them; one file may hold both).
	CertFile, KeyFile string
	// KubeletPort is the only port the agent dials (default 10250).
	KubeletPort int
	// Local says whether ip is one of this host's addresses (default: an
	// address of one of its interfaces): the only hosts the agent dials.
	Local func(ip net.IP) bool
}

// Agent keeps a tunnel to every server and dials, for the servers, the
// node's own kubelet and nothing else. It is a component: Start returns at
// once, the tunnels connect (and reconnect, with backoff) in the
// background; Ready does not wait for them, as a node works without.
type Agent struct {
	o      AgentOptions
	resync time.Duration // how often Servers is asked (resyncServers)

	mu     sync.Mutex
	links  map[string]*link
	cancel context.CancelFunc
	done   chan struct{}
}

var _ component.Component = (*Agent)(nil)

// link is the tunnel to one server.
type link struct {
	cancel    context.CancelFunc
	done      chan struct{}
	connected bool
}

// NewAgent checks and completes o.
func NewAgent(o AgentOptions) (*Agent, error) {
	var errs []error
	if o.Mode != ModeAuto && o.Mode != ModeAlways {
		errs = append(errs, fmt.Errorf("node tunnel: mode %q", o.Mode))
	}
	if o.Servers == nil {
		errs = append(errs, errors.New("node tunnel: no servers"))
	}
	if o.CAFile == "" || o.CertFile == "" {
		errs = append(errs, errors.New("node tunnel: a CA file and a client certificate are required"))
	}
	if o.KeyFile == "" {
		o.KeyFile = o.CertFile
	}
	if o.ServerName == "" {
		o.ServerName = DefaultServerName
	}
	if o.KubeletPort == 0 {
		o.KubeletPort = defaultKubeletPort
	}
	if o.Local == nil {
		o.Local = hostAddress
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Agent{o: o, resync: resyncServers, links: map[string]*link{}}, nil
}

// Name implements component.Component.
func (a *Agent) Name() string { return AgentName }

// Start connects to every server, in the background.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), klog.FromContext(ctx).WithName(AgentName)))
	a.cancel, a.done = cancel, make(chan struct{})
	go a.run(runCtx)
	return nil
}

// Ready implements component.Component: a node works without its tunnels.
func (a *Agent) Ready(context.Context) error { return nil }

// Stop closes every tunnel.
func (a *Agent) Stop(ctx context.Context) error {
	a.mu.Lock()
	cancel, done := a.cancel, a.done
	a.cancel = nil
	a.mu.Unlock()
	return component.StopWorker(ctx, cancel, done)
}

// Connected are the servers a tunnel is open to.
func (a *Agent) Connected() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for s, l := range a.links {
		if l.connected {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// run keeps one link per server until ctx ends.
func (a *Agent) run(ctx context.Context) {
	defer close(a.done)
	for {
		a.sync(ctx, a.o.Servers())
		select {
		case <-ctx.Done():
			a.sync(ctx, nil)
			return
		case <-time.After(a.resync):
		}
	}
}

// sync starts a link to each server in want and stops the others.
func (a *Agent) sync(ctx context.Context, want []string) {
	a.mu.Lock()
	var stop []*link
	for s, l := range a.links {
		if !slices.Contains(want, s) || ctx.Err() != nil {
			stop = append(stop, l)
			delete(a.links, s)
		}
	}
	if ctx.Err() == nil {
		for _, s := range want {
			if a.links[s] == nil {
				lctx, cancel := context.WithCancel(ctx)
				l := &link{cancel: cancel, done: make(chan struct{})}
				a.links[s] = l
				go a.keep(klog.NewContext(lctx, klog.FromContext(ctx).WithValues("server", s)), s, l)
			}
		}
	}
	a.mu.Unlock()
	for _, l := range stop {
		l.cancel()
		<-l.done
	}
}

// keep connects to server and serves the tunnel, again after each end,
// with exponential backoff (1 s to 30 s, jittered) while it fails.
func (a *Agent) keep(ctx context.Context, server string, l *link) {
	defer close(l.done)
	logger := klog.FromContext(ctx)
	backoff := minBackoff
	var lastErr string // the same failure again is logged at V(2) only
	for ctx.Err() == nil {
		mux, err := a.connect(ctx, server)
		if err == nil {
			logger.Info("Node tunnel connected")
			a.setConnected(l, true)
			backoff, lastErr = minBackoff, ""
			a.serve(ctx, mux)
			a.setConnected(l, false)
			if ctx.Err() == nil {
				logger.Info("Node tunnel lost: reconnecting")
			}
		} else if ctx.Err() == nil {
			v := 0
			if err.Error() == lastErr {
				v = 2
			}
			lastErr = err.Error()
			logger.V(v).Info("Node tunnel: cannot connect", "err", err, "retryIn", backoff)
		}
		jitter := time.Duration(rand.Int64N(int64(backoff) / 5))
		select {
		case <-ctx.Done():
		case <-time.After(backoff + jitter):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (a *Agent) setConnected(l *link, c bool) {
	a.mu.Lock()
	l.connected = c
	a.mu.Unlock()
}

// connect opens the tunnel to server: TLS with the node's certificate,
// then the upgrade.
func (a *Agent) connect(ctx context.Context, server string) (*yamux.Session, error) {
	cfg, err := a.tlsConfig()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 30 * time.Second}, Config: cfg}
	conn, err := d.DialContext(dctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Now()) })
	mux, err := upgrade(conn, server, a.o.Mode)
	if !stop() && err == nil {
		err = dctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return mux, nil
}

// upgrade asks the server for the tunnel on conn.
func upgrade(conn net.Conn, server string, mode Mode) (*yamux.Session, error) {
	req := "GET " + Path + " HTTP/1.1\r\nHost: " + server + "\r\nConnection: Upgrade\r\nUpgrade: " + UpgradeToken +
		"\r\n" + ModeHeader + ": " + string(mode) + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		_ = resp.Body.Close()
		return nil, fmt.Errorf("server answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return yamux.Server(withBuffer(conn, br), yamuxConfig())
}

// tlsConfig reads the CA and the node's certificate (both may have been
// renewed since the last connect).
func (a *Agent) tlsConfig() (*tls.Config, error) {
	ca, err := os.ReadFile(a.o.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate", a.o.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(a.o.CertFile, a.o.KeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		RootCAs: roots, ServerName: a.o.ServerName, MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"}, // an upgrade needs HTTP/1.1
	}, nil
}

// serve answers the server's streams until the session or ctx ends.
func (a *Agent) serve(ctx context.Context, mux *yamux.Session) {
	stop := context.AfterFunc(ctx, func() { _ = mux.Close() })
	defer stop()
	defer func() { _ = mux.Close() }()
	logger := klog.FromContext(ctx)
	for {
		st, err := mux.AcceptStream()
		if err != nil {
			return
		}
		go a.handle(logger, st)
	}
}

// handle reads a stream's destination, dials it when it is this node's
// kubelet, answers, and copies.
func (a *Agent) handle(logger klog.Logger, st *yamux.Stream) {
	_ = st.SetDeadline(time.Now().Add(streamHeaderTimeout))
	addr, err := readLine(st)
	if err != nil {
		_ = st.Close()
		return
	}
	var c net.Conn
	if err = a.allowed(addr); err == nil {
		c, err = net.DialTimeout("tcp", addr, kubeletDialTimeout)
	}
	if err != nil {
		logger.V(2).Info("Node tunnel: refused a dial", "address", addr, "err", err)
	}
	if aerr := answer(st, err); aerr != nil || err != nil {
		_ = st.Close()
		if c != nil {
			_ = c.Close()
		}
		return
	}
	_ = st.SetDeadline(time.Time{})
	splice(st, c)
}
