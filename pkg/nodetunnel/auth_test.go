package nodetunnel

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestTunnelCredentials: only a node's own client certificate opens a
// tunnel, and it opens one for that node only.
func TestTunnelCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, ctx)
	for _, tc := range []struct {
		name    string
		cert    string // "" : no client certificate
		mode    Mode
		wantErr string // "" : 101, a tunnel of node "a"
	}{
		{name: "no client certificate", mode: ModeAuto, wantErr: "401"},
		{name: "not a node: an administrator", cert: c.pki.client(t, "admin", "system:masters"), mode: ModeAuto, wantErr: "403"},
		{name: "a node's name outside system:nodes", cert: c.pki.client(t, "system:node:a"), mode: ModeAuto, wantErr: "403"},
		{name: "a certificate of another CA", cert: newTestPKI(t).client(t, "system:node:a", "system:nodes"), mode: ModeAuto, wantErr: "401"},
		{name: "mode off is no tunnel", cert: c.pki.client(t, "system:node:a", "system:nodes"), mode: ModeOff, wantErr: "400"},
		{name: "node a", cert: c.pki.client(t, "system:node:a", "system:nodes"), mode: ModeAlways},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: c.pki.pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
			if tc.cert != "" {
				pair, err := tls.LoadX509KeyPair(tc.cert, tc.cert)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Certificates = []tls.Certificate{pair}
			}
			conn, err := tls.Dial("tcp", c.api.Listener.Addr().String(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			mux, err := upgrade(conn, "127.0.0.1", tc.mode)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("upgrade: %v, want %s", err, tc.wantErr)
				}
				if got := c.tunnel.Connected(); len(got) != 0 {
					t.Fatalf("tunnels after a refused upgrade: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = mux.Close() }()
			c.waitConnected(t, ctx, "a")
		})
	}
}

// TestAgentDialsOnlyItsKubelet: the agent dials the kubelet's port on its
// own addresses for the server and refuses every other destination, so a
// server (or one who took a server's place) cannot reach into the node's
// network through the tunnel.
func TestAgentDialsOnlyItsKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, ctx)
	c.startAgent(t, ctx, ModeAlways, c.pki.client(t, "system:node:a", "system:nodes"))
	c.waitConnected(t, ctx, "a")
	ss := c.tunnel.newest("a")
	port := strconv.Itoa(c.kubeletPort)
	for _, tc := range []struct {
		name, addr, wantErr string
	}{
		{name: "its kubelet", addr: c.kubeletAddr},
		{name: "another port of the node", addr: c.api.Listener.Addr().String(), wantErr: "is not the kubelet's"},
		{name: "another host", addr: net.JoinHostPort("192.0.2.1", port), wantErr: "is not this node's address"},
		{name: "a name", addr: net.JoinHostPort("localhost", port), wantErr: "is not an IP address"},
		{name: "no port", addr: "127.0.0.1", wantErr: "missing port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := ss.dial(ctx, tc.addr)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = conn.Close()
				return
			}
			if err == nil {
				_ = conn.Close()
				t.Fatalf("dial %s through the tunnel: allowed", tc.addr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("dial %s: %v, want %q", tc.addr, err, tc.wantErr)
			}
		})
	}
}

// TestHostAddress: by default the agent's own addresses are those of its
// interfaces, never loopback or unspecified ones.
func TestHostAddress(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", false}, {"::1", false}, {"0.0.0.0", false}, {"169.254.1.1", false}, {"192.0.2.1", false}, {"224.0.0.1", false},
	} {
		if got := hostAddress(net.ParseIP(tc.ip)); got != tc.want {
			t.Errorf("hostAddress(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

// TestAgentReconnects: a tunnel whose link drops is opened again, and
// dials go through the new one; a stopped agent's tunnel closes.
func TestAgentReconnects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, ctx)
	c.blocked.Store(true)
	a := c.startAgent(t, ctx, ModeAuto, c.pki.client(t, "system:node:a", "system:nodes"))
	c.waitConnected(t, ctx, "a")
	first := c.tunnel.newest("a")
	_ = first.mux.Close() // the link drops
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		ss := c.tunnel.newest("a")
		return ss != nil && ss != first, nil
	}); err != nil {
		t.Fatal("the agent did not reconnect")
	}
	if got, err := c.get(ctx); err != nil || got != "127.0.0.1" {
		t.Fatalf("after reconnecting: %q, %v; want the tunnel", got, err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitConnected(t, ctx)
	if got := a.Connected(); len(got) != 0 {
		t.Fatalf("a stopped agent is connected to %v", got)
	}
}

// TestParseMode: the --node-tunnel values.
func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeAuto, "auto": ModeAuto, "Always": ModeAlways, " off ": ModeOff, "on": ""} {
		got, err := ParseMode(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestTwoTunnelsOfOneNode: a node with two tunnels to one server (it knows
// the server by two addresses) keeps both, and dials take the newest;
// when that one ends, the other carries them.
func TestTwoTunnelsOfOneNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, ctx)
	c.blocked.Store(true)
	cert := c.pki.client(t, "system:node:a", "system:nodes")
	first := c.startAgent(t, ctx, ModeAlways, cert)
	c.waitConnected(t, ctx, "a")
	older := c.tunnel.newest("a")
	second := c.startAgent(t, ctx, ModeAlways, cert)
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.tunnel.newest("a") != older && len(second.Connected()) == 1, nil
	}); err != nil {
		t.Fatal("the second tunnel never became the newest")
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		return len(first.Connected()) == 0, nil
	}); err == nil {
		t.Fatal("the first tunnel was closed by the second")
	}
	if got, err := c.get(ctx); err != nil || got != "127.0.0.1" {
		t.Fatalf("through the newest tunnel: %q, %v", got, err)
	}
	if err := second.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.tunnel.newest("a") == older, nil
	}); err != nil {
		t.Fatal("the older tunnel does not carry dials once the newer one ended")
	}
	if got, err := c.get(ctx); err != nil || got != "127.0.0.1" {
		t.Fatalf("through the older tunnel: %q, %v", got, err)
	}
}

// TestAgentFollowsServers: the agent keeps a tunnel to every server it is
// given, opens one to a server that appears and closes the one to a server
// that is gone.
func TestAgentFollowsServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startCluster(t, ctx)
	second := NewServer(ServerOptions{})
	secondAPI := c.serve(t, second)
	t.Cleanup(func() { _ = second.Stop(context.Background()) })
	first, other := c.api.Listener.Addr().String(), secondAPI.Listener.Addr().String()
	var servers atomic.Pointer[[]string]
	servers.Store(&[]string{first})
	a, err := NewAgent(AgentOptions{
		Mode: ModeAuto, Servers: func() []string { return *servers.Load() },
		CAFile: c.pki.CAFile, CertFile: c.pki.client(t, "system:node:a", "system:nodes"), KubeletPort: c.kubeletPort,
	})
	if err != nil {
		t.Fatal(err)
	}
	a.resync = 50 * time.Millisecond
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	for _, step := range []struct {
		servers           []string
		onFirst, onSecond bool
	}{
		{[]string{first}, true, false},
		{[]string{first, other}, true, true},
		{[]string{other}, false, true},
	} {
		servers.Store(&step.servers)
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return slices.Equal(a.Connected(), sorted(step.servers)) &&
				(len(c.tunnel.Connected()) == 1) == step.onFirst && (len(second.Connected()) == 1) == step.onSecond, nil
		}); err != nil {
			t.Fatalf("servers %v: the agent is connected to %v; first server's tunnels %v, second's %v",
				step.servers, a.Connected(), c.tunnel.Connected(), second.Connected())
		}
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
