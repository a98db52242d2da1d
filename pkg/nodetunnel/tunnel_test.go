package nodetunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/client-go/kubernetes/fake"
)

// errDropped is what a direct dial of the kubelet gets while the test's
// "drop rule" is on.
var errDropped = errors.New("dropped by the test's firewall")

// testCluster is a tunnel server on a real TLS listener, authenticating
// with upstream's x509 authenticator, and a "kubelet" (an HTTPS server on
// 127.0.0.1 that answers with its caller's address) of Node "a". The
// server dials directly from 127.0.0.2, so the kubelet tells direct dials
// (from 127.0.0.2) from tunnelled ones (the agent's, from 127.0.0.1).
type testCluster struct {
	pki         *testPKI
	kubeletAddr string
	kubeletPort int
	blocked     atomic.Bool
	tunnel      *Server
	api         *httptest.Server
}

const directFrom = "127.0.0.2"

func startCluster(t testing.TB, ctx context.Context, nodes ...*corev1.Node) *testCluster {
	t.Helper()
	c := &testCluster{pki: newTestPKI(t)}
	kubelet := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mib" { // a MiB, for the benchmarks' throughput
			_, _ = w.Write(make([]byte, 1<<20))
			return
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		_, _ = io.WriteString(w, host)
	}))
	kubelet.TLS = &tls.Config{Certificates: []tls.Certificate{c.pki.serving(t)}}
	kubelet.StartTLS()
	t.Cleanup(kubelet.Close)
	c.kubeletAddr = kubelet.Listener.Addr().String()
	c.kubeletPort = kubelet.Listener.Addr().(*net.TCPAddr).Port

	if len(nodes) == 0 {
		nodes = []*corev1.Node{testNode("a", "127.0.0.1", c.kubeletPort), testNode("b", "192.0.2.2", c.kubeletPort)}
	}
	objs := make([]runtime.Object, 0, len(nodes))
	for _, n := range nodes {
		if n.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
			n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(c.kubeletPort)
		}
		objs = append(objs, n)
	}
	dialer := &net.Dialer{
		Timeout:   5 * time.Second,
		LocalAddr: &net.TCPAddr{IP: net.ParseIP(directFrom)},
		Control: func(_, address string, _ syscall.RawConn) error {
			if c.blocked.Load() && address == c.kubeletAddr {
				return errDropped
			}
			return nil
		},
	}
	c.tunnel = NewServer(ServerOptions{Client: fake.NewClientset(objs...), Dialer: dialer, ProbeInterval: time.Hour})
	if err := c.tunnel.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.tunnel.Stop(context.Background()) })
	if err := c.tunnel.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	c.api = c.serve(t, c.tunnel)
	return c
}

// serve is an API port of the cluster's PKI that takes tunnels for s.
func (c *testCluster) serve(t testing.TB, s *Server) *httptest.Server {
	opts := x509.DefaultVerifyOptions()
	opts.Roots = c.pki.pool
	authn := x509.New(opts, x509.CommonNameUserConversion)
	api := httptest.NewUnstartedServer(s.Handler(http.NotFoundHandler(), authn))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{c.pki.serving(t)}, ClientAuth: tls.RequestClientCert}
	api.StartTLS()
	t.Cleanup(api.Close)
	return api
}

func testNode(name, ip string, port int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		},
	}
}

// startAgent opens a tunnel with the client certificate file certFile.
func (c *testCluster) startAgent(t testing.TB, ctx context.Context, mode Mode, certFile string) *Agent {
	t.Helper()
	a, err := NewAgent(AgentOptions{
		Mode: mode, Servers: func() []string { return []string{c.api.Listener.Addr().String()} },
		CAFile: c.pki.CAFile, CertFile: certFile, KubeletPort: c.kubeletPort,
		Local: func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	return a
}

// waitConnected waits until the server has a tunnel of each node named.
func (c *testCluster) waitConnected(t testing.TB, ctx context.Context, nodes ...string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got := c.tunnel.Connected()
		slices.Sort(got)
		return slices.Equal(got, nodes), nil
	})
	if err != nil {
		t.Fatalf("tunnels connected: %v, want %v", c.tunnel.Connected(), nodes)
	}
}

// get asks the kubelet, dialled as the API server dials it, who called.
func (c *testCluster) get(ctx context.Context) (string, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext:     c.tunnel.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: c.pki.pool},
	}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + c.kubeletAddr + "/")
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestDialRoutes: the API server's dials of a kubelet go through the node's
// tunnel when direct dials are dropped (auto) or the node asks (always),
// directly on a flat network (auto), and nowhere else: without a tunnel, or
// with only another node's, a dropped dial fails.
func TestDialRoutes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  Mode // ModeOff: no agent
		node  string
		block bool
		// twin: a second Node "b" claims node a's address too (a node
		// may write its own Node's addresses).
		twin    bool
		want    string // the kubelet's caller: "127.0.0.1" tunnel, directFrom direct
		wantErr string
	}{
		{name: "auto, direct dials dropped: the tunnel", mode: ModeAuto, node: "a", block: true, want: "127.0.0.1"},
		{name: "auto, flat network: direct", mode: ModeAuto, node: "a", want: directFrom},
		{name: "always: the tunnel on a flat network too", mode: ModeAlways, node: "a", want: "127.0.0.1"},
		{name: "no tunnel, direct dials dropped: no way", mode: ModeOff, block: true, wantErr: errDropped.Error()},
		{name: "another node's tunnel carries nothing for this one", mode: ModeAlways, node: "b", block: true, wantErr: errDropped.Error()},
		{name: "an address two Nodes claim goes through neither's tunnel", mode: ModeAlways, node: "a", twin: true, block: true, wantErr: errDropped.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var nodes []*corev1.Node
			if tc.twin {
				nodes = []*corev1.Node{testNode("a", "127.0.0.1", 0), testNode("b", "127.0.0.1", 0)}
			}
			c := startCluster(t, ctx, nodes...)
			c.blocked.Store(tc.block)
			if tc.mode != ModeOff {
				c.startAgent(t, ctx, tc.mode, c.pki.client(t, "system:node:"+tc.node, "system:nodes"))
				c.waitConnected(t, ctx, tc.node)
			}
			if tc.wantErr != "" {
				if got, err := c.get(ctx); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("get = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			// The probe of an auto node runs at connect: poll for its verdict.
			var got string
			var err error
			if perr := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				got, err = c.get(ctx)
				return err == nil && got == tc.want, nil
			}); perr != nil {
				t.Fatalf("the kubelet's caller: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestDialFallsBack: a node probed as directly reachable whose direct dials
// start to fail (a firewall rule added later) is dialled through its tunnel
// at once, without waiting for the next probe.
func TestDialFallsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, ctx)
	c.startAgent(t, ctx, ModeAuto, c.pki.client(t, "system:node:a", "system:nodes"))
	c.waitConnected(t, ctx, "a")
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := c.get(ctx)
		return err == nil && got == directFrom, nil
	}); err != nil {
		t.Fatal("never dialled directly")
	}
	c.blocked.Store(true)
	if got, err := c.get(ctx); err != nil || got != "127.0.0.1" {
		t.Fatalf("after the drop rule: %q, %v; want the tunnel (127.0.0.1)", got, err)
	}
}
