package nodetunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/auth/nodeidentifier"

	"github.com/edgeplane/edgeplane/internal/component"
)

// Name is the server part's name.
const Name = "node-tunnel"

// Defaults of ServerConfig.
const (
	DefaultProbeInterval = 30 * time.Second
	DefaultProbeTimeout  = 3 * time.Second
	defaultDialTimeout   = 30 * time.Second
	defaultKubeletPort   = 10250
	// addressIndex is the Node index by address; named for this package, as
	// the informer may be shared.
	addressIndex = "nodetunnel.edgeplane.io/address"
)

// ServerOptions configure the server's end of node tunnels.
type ServerOptions struct {
	// Client reads Nodes: which node an address belongs to, and where its
	// kubelet listens. Set before Start (the server's own admin client).
	Client kubernetes.Interface
	// Informers, when set, gives the shared informer factory Start takes its
	// Node informer from (the API server's, chain.Server.Informers, which
	// exists only once the chain has started); the informer is left running
	// on Stop. Else Start lists and watches Nodes with Client, keeping only
	// what the tunnel reads of each (trimNode).
	Informers func() informers.SharedInformerFactory
	// AddressTypes are the Node address types the API server dials
	// kubelets at, in order; the probe of a node in ModeAuto dials the
	// first.
	AddressTypes []corev1.NodeAddressType
	// ProbeInterval is how often a tunnelled node in ModeAuto is probed
	// directly (default DefaultProbeInterval).
	ProbeInterval time.Duration
	// ProbeTimeout bounds a probe, and a direct dial of a node that has a
	// tunnel (default DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// Dialer dials directly (default: a net.Dialer with a 30 s timeout).
	Dialer *net.Dialer
}

// Server is the server's end: it takes tunnels on the API port (Handler)
// and dials kubelets through them (DialContext). It is a component: Start
// begins to watch Nodes, Stop closes every tunnel.
type Server struct {
	o ServerOptions

	mu sync.Mutex
	// sessions are each node's tunnels, newest last: a node has one per
	// address it knows this server by (its --server and the server's
	// advertised address may differ), and a new one while this end has
	// not yet noticed the old one's link gone.
	sessions map[string][]*session
	nodes    cache.Indexer
	synced   []cache.InformerSynced
	cancel   context.CancelFunc
	done     chan struct{}
	logger   klog.Logger
	wg       sync.WaitGroup
}

var _ component.Component = (*Server)(nil)

// NewServer completes o; nothing runs until Start.
func NewServer(o ServerOptions) *Server {
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: 30 * time.Second}
	}
	if len(o.AddressTypes) == 0 {
		o.AddressTypes = []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP}
	}
	return &Server{o: o, sessions: map[string][]*session{}, logger: klog.Background().WithName(Name)}
}

// Name implements component.Component.
func (s *Server) Name() string { return Name }

// Start watches Nodes, indexed by address.
func (s *Server) Start(ctx context.Context) error {
	if s.o.Client == nil {
		return errors.New("node tunnel: no client")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil
	}
	s.logger = klog.FromContext(ctx).WithName(Name)
	var factory informers.SharedInformerFactory
	if s.o.Informers != nil {
		factory = s.o.Informers()
	}
	own := factory == nil
	if own {
		factory = informers.NewSharedInformerFactoryWithOptions(s.o.Client, 0, informers.WithTransform(trimNode))
	}
	inf := factory.Core().V1().Nodes().Informer()
	// A shared informer keeps the index of an earlier Start.
	if _, ok := inf.GetIndexer().GetIndexers()[addressIndex]; !ok {
		if err := inf.AddIndexers(cache.Indexers{addressIndex: nodeAddresses}); err != nil {
			return err
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.nodes, s.synced, s.cancel, s.done = inf.GetIndexer(), []cache.InformerSynced{inf.HasSynced}, cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		factory.Start(runCtx.Done())
		<-runCtx.Done()
		if own {
			factory.Shutdown()
		}
	}()
	return nil
}

// Ready waits for the first list of Nodes.
func (s *Server) Ready(ctx context.Context) error {
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	return component.WaitSynced(ctx, Name, synced)
}

// Stop closes every tunnel and stops watching Nodes.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel = nil
	sessions := s.sessions
	s.sessions = map[string][]*session{}
	s.mu.Unlock()
	for _, list := range sessions {
		for _, ss := range list {
			_ = ss.mux.Close()
		}
	}
	if err := component.StopWorker(ctx, cancel, done); err != nil {
		return err
	}
	wait := make(chan struct{})
	go func() { s.wg.Wait(); close(wait) }()
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// trimNode keeps what the tunnel needs of a Node: its addresses and its
// kubelet's port.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Status: corev1.NodeStatus{
			Addresses:       n.Status.Addresses,
			DaemonEndpoints: n.Status.DaemonEndpoints,
		},
	}, nil
}

// nodeAddresses indexes a Node by every address it has.
func nodeAddresses(obj any) ([]string, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Address != "" {
			out = append(out, a.Address)
		}
	}
	return out, nil
}

// Handler serves the tunnel path of the API port, authenticated by authn
// (the API server's own authenticator), and passes every other request to
// next.
func (s *Server) Handler(next http.Handler, authn authenticator.Request) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			next.ServeHTTP(w, r)
			return
		}
		s.serveTunnel(w, r, authn)
	})
}

// serveTunnel takes a node's tunnel: only a node's own credentials, for
// that node only.
func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request, authn authenticator.Request) {
	s.mu.Lock()
	logger := s.logger.WithValues("remote", r.RemoteAddr)
	s.mu.Unlock()
	if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), UpgradeToken) {
		http.Error(w, "node tunnel: want GET with Upgrade: "+UpgradeToken, http.StatusBadRequest)
		return
	}
	if authn == nil {
		http.Error(w, "node tunnel: no authenticator", http.StatusInternalServerError)
		return
	}
	resp, ok, err := authn.AuthenticateRequest(r)
	if err != nil || !ok {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	name, isNode := nodeidentifier.NewDefaultNodeIdentifier().NodeIdentity(resp.User)
	if !isNode || name == "" {
		logger.Info("Refused a node tunnel: not a node's credentials", "user", resp.User.GetName())
		http.Error(w, fmt.Sprintf("node tunnel: %q is not a node", resp.User.GetName()), http.StatusForbidden)
		return
	}
	mode, err := ParseMode(r.Header.Get(ModeHeader))
	if err != nil || mode == ModeOff {
		http.Error(w, "node tunnel: bad "+ModeHeader, http.StatusBadRequest)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "node tunnel: needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		logger.Error(err, "Node tunnel: hijack")
		return
	}
	_ = conn.SetDeadline(time.Time{})
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + UpgradeToken + "\r\n\r\n"); err != nil || rw.Flush() != nil {
		_ = conn.Close()
		return
	}
	mux, err := yamux.Client(withBuffer(conn, rw.Reader), yamuxConfig())
	if err != nil {
		_ = conn.Close()
		return
	}
	s.add(logger.WithValues("node", name), &session{node: name, mode: mode, mux: mux})
}

// add registers a node's session beside the ones it has (dials take the
// newest), and runs it until it ends.
func (s *Server) add(logger klog.Logger, ss *session) {
	s.mu.Lock()
	if s.cancel == nil && s.nodes != nil { // stopped
		s.mu.Unlock()
		_ = ss.mux.Close()
		return
	}
	s.sessions[ss.node] = append(s.sessions[ss.node], ss)
	s.wg.Add(1)
	s.mu.Unlock()
	logger.Info("Node tunnel connected", "mode", ss.mode)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer s.wg.Done()
		defer cancel()
		if ss.mode == ModeAuto {
			go s.probeLoop(klog.NewContext(ctx, logger), ss)
		}
		<-ss.mux.CloseChan()
		s.mu.Lock()
		list := slices.DeleteFunc(s.sessions[ss.node], func(o *session) bool { return o == ss })
		if len(list) == 0 {
			delete(s.sessions, ss.node)
		} else {
			s.sessions[ss.node] = list
		}
		s.mu.Unlock()
		logger.Info("Node tunnel disconnected")
	}()
}

// Connected are the nodes with a tunnel to this server.
func (s *Server) Connected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.sessions))
	for n := range s.sessions {
		out = append(out, n)
	}
	return out
}

// DialContext dials addr: through the tunnel of the node addr's host
// belongs to when that node has one and it is to be used, else directly.
// It is the API server's dialer of the cluster network (kubelets, the node
// proxy) and the metrics scrape's.
func (s *Server) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ss := s.route(addr)
	if ss == nil {
		return s.o.Dialer.DialContext(ctx, network, addr)
	}
	if ss.tunnelFirst() {
		return ss.dial(ctx, addr)
	}
	// ModeAuto, direct dials work: dial directly, and fall back to the
	// tunnel (from now on, until the next probe) when that fails.
	dctx, cancel := context.WithTimeout(ctx, s.o.ProbeTimeout)
	c, err := s.o.Dialer.DialContext(dctx, network, addr)
	cancel()
	if err == nil {
		return c, nil
	}
	if ctx.Err() != nil {
		return nil, err
	}
	ss.setDirect(klog.FromContext(ctx).WithValues("node", ss.node), false, err)
	return ss.dial(ctx, addr)
}

// route is the session of the node whose address addr's host is, when
// exactly one Node has that address and its port is the kubelet's.
func (s *Server) route(addr string) *session {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	nodes := s.nodes
	empty := len(s.sessions) == 0
	s.mu.Unlock()
	if nodes == nil || empty {
		return nil
	}
	objs, err := nodes.ByIndex(addressIndex, host)
	if err != nil || len(objs) != 1 {
		return nil // not a node's, or claimed by two Nodes: trust neither
	}
	n := objs[0].(*corev1.Node)
	if port != strconv.Itoa(kubeletPort(n)) {
		return nil
	}
	return s.newest(n.Name)
}

// newest is node's newest open session, nil when it has none.
func (s *Server) newest(node string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.sessions[node]
	for i := len(list) - 1; i >= 0; i-- {
		if !list[i].mux.IsClosed() {
			return list[i]
		}
	}
	return nil
}

// kubeletPort is where n's kubelet listens.
func kubeletPort(n *corev1.Node) int {
	if p := int(n.Status.DaemonEndpoints.KubeletEndpoint.Port); p > 0 {
		return p
	}
	return defaultKubeletPort
}

// kubeletAddress is the address the API server dials n's kubelet at.
func (s *Server) kubeletAddress(name string) string {
	s.mu.Lock()
	nodes := s.nodes
	s.mu.Unlock()
	if nodes == nil {
		return ""
	}
	obj, ok, err := nodes.GetByKey(name)
	if err != nil || !ok {
		return ""
	}
	n := obj.(*corev1.Node)
	for _, t := range s.o.AddressTypes {
		for _, a := range n.Status.Addresses {
			if a.Type == t && a.Address != "" {
				return net.JoinHostPort(a.Address, strconv.Itoa(kubeletPort(n)))
			}
		}
	}
	return ""
}

// probeLoop decides, for a node in ModeAuto, whether the API server can
// dial its kubelet directly: a TLS handshake with it (a bare TCP connect
// would make the kubelet log a handshake error each time), when the
// tunnel connects and every ProbeInterval.
func (s *Server) probeLoop(ctx context.Context, ss *session) {
	logger := klog.FromContext(ctx)
	for {
		wait := s.o.ProbeInterval
		if addr := s.kubeletAddress(ss.node); addr == "" {
			wait = 2 * time.Second // the Node is not registered yet
		} else {
			ss.setDirect(logger, s.probe(ctx, addr) == nil, nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// probe checks that addr answers a TLS handshake, dialled directly. What
// the kubelet's certificate is does not matter here: the API server
// verifies it on every real connection.
func (s *Server) probe(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.ProbeTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: s.o.Dialer, Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}} //nolint:gosec // reachability only
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
