package apiendpoint

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testlink"
	"github.com/edgeplane/edgeplane/pkg/certs"
)

// failoverBound is "within a few seconds": a server's death to the first
// event a client-go watch through the endpoint receives from another.
const failoverBound = 10 * time.Second

// TestEndpoint runs two real API servers sharing one datastore: member 0
// on the host's address, published in the `kubernetes` EndpointSlice,
// member 1 on 127.0.0.1, published nowhere (the --server of a node).
func TestEndpoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testapiserver.StartCluster(t, ctx, testapiserver.MemberOptions{Advertised: true}, testapiserver.MemberOptions{})
	admin := c.Client(t, 1)
	published := c.Members[0].Addr
	// The lease reconciler publishes member 0.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		return err == nil && slices.Equal(sliceAddresses(s), []string{published}), nil
	}); err != nil {
		t.Fatalf("the kubernetes EndpointSlice never listed %s only: %v", published, err)
	}

	t.Run("nodes read the kubernetes EndpointSlice and nothing else", func(t *testing.T) {
		node := nodeClient(t, ctx, c, "https://"+c.Members[1].Addr)
		byName := metav1.ListOptions{FieldSelector: "metadata.name=kubernetes"}
		if _, err := node.DiscoveryV1().EndpointSlices("default").List(ctx, byName); !apierrors.IsForbidden(err) {
			t.Fatalf("before EnsureRBAC a node listed the kubernetes EndpointSlice (err %v); the test shows nothing", err)
		}
		if err := EnsureRBAC(ctx, admin); err != nil {
			t.Fatal(err)
		}
		if err := EnsureRBAC(ctx, admin); err != nil {
			t.Fatalf("EnsureRBAC again: %v", err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := node.DiscoveryV1().EndpointSlices("default").List(ctx, byName)
			return err == nil, nil
		}); err != nil {
			t.Fatalf("a node cannot list the kubernetes EndpointSlice by name: %v", err)
		}
		w, err := node.DiscoveryV1().EndpointSlices("default").Watch(ctx, byName)
		if err != nil {
			t.Fatalf("a node cannot watch the kubernetes EndpointSlice: %v", err)
		}
		w.Stop()
		for what, f := range map[string]func() error{
			"list every EndpointSlice of default": func() error {
				_, err := node.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{})
				return err
			},
			"list EndpointSlices of kube-system": func() error {
				_, err := node.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{})
				return err
			},
			"update the kubernetes EndpointSlice": func() error {
				s, err := admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
				if err != nil {
					return err
				}
				_, err = node.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{})
				return err
			},
		} {
			if err := f(); !apierrors.IsForbidden(err) {
				t.Errorf("a node may %s (err %v), want forbidden", what, err)
			}
		}
	})

	t.Run("learns the servers from the EndpointSlice and keeps them", func(t *testing.T) {
		if err := EnsureRBAC(ctx, admin); err != nil { // when run alone
			t.Fatal(err)
		}
		dir := t.TempDir()
		stateFile := filepath.Join(dir, StateFileName)
		listen := freeAddr(t)
		kubeconfig := nodeKubeconfig(t, ctx, c, "https://"+listen)
		e := start(t, ctx, Config{Listen: listen, Server: c.Members[1].Addr, StateFile: stateFile, CAFile: c.PKI.ServerCA.Cert, Kubeconfig: kubeconfig})
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return slices.Contains(e.Servers(), published), nil
		}); err != nil {
			t.Fatalf("the endpoint never learned %s (servers %v): %v", published, e.Servers(), err)
		}
		if got, want := e.Servers(), []string{published, c.Members[1].Addr}; !slices.Equal(got, want) {
			t.Errorf("servers %v, want %v (the learned ones, then --server)", got, want)
		}
		var st state
		fi := readState(t, stateFile, &st)
		if !slices.Equal(st.Servers, []string{published}) {
			t.Errorf("%s holds %v, want [%s]", stateFile, st.Servers, published)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", stateFile, fi.Mode().Perm())
		}
		stop(t, e)

		// The next start begins with them, and learning the same list
		// again writes nothing.
		e = start(t, ctx, Config{Listen: listen, Server: c.Members[1].Addr, StateFile: stateFile, CAFile: c.PKI.ServerCA.Cert, Kubeconfig: kubeconfig})
		if got := e.Servers(); !slices.Contains(got, published) {
			t.Errorf("restarted, the endpoint knows %v, not %s from %s", got, published, stateFile)
		}
		e.learn(ctx, []string{published})
		if fi2, err := os.Stat(stateFile); err != nil || !os.SameFile(fi, fi2) || !fi2.ModTime().Equal(fi.ModTime()) {
			t.Errorf("%s was rewritten although the servers did not change (err %v)", stateFile, err)
		}
		stop(t, e)
	})

	t.Run("a corrupt or stale list on disk never stops --server", func(t *testing.T) {
		silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		for _, tc := range []struct {
			name, content string
			logged        string
		}{
			{"stale: every server gone", `{"servers":["` + testenv.RefusingAddr(t) + `","` + silent.Addr().String() + `","` + testenv.RefusingAddr(t) + `"]}`, ""},
			{"corrupt: not JSON", "\x00\x17{servers", "Ignoring the API servers kept on disk"},
			{"corrupt: not host:port", `{"servers":["https://10.0.0.1:6443/x"]}`, "Ignoring the API servers kept on disk"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				stateFile := filepath.Join(t.TempDir(), StateFileName)
				if err := os.WriteFile(stateFile, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var lines []string
				lctx := klog.NewContext(ctx, funcr.New(func(prefix, args string) {
					mu.Lock()
					defer mu.Unlock()
					lines = append(lines, args)
				}, funcr.Options{}))
				listen := freeAddr(t)
				e := start(t, lctx, Config{Listen: listen, Server: c.Members[1].Addr, StateFile: stateFile, CAFile: c.PKI.ServerCA.Cert})
				defer stop(t, e)
				client := adminThrough(t, c, listen)
				begin := time.Now()
				for i := range 5 {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := client.CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{})
					cancel()
					if err != nil {
						t.Fatalf("request %d through the endpoint: %v", i, err)
					}
				}
				t.Logf("5 requests in %s", time.Since(begin))
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, l := range lines {
					if tc.logged != "" && strings.Contains(l, tc.logged) {
						n++
					}
				}
				if tc.logged != "" && n != 1 {
					t.Errorf("%d log lines with %q, want one; lines: %q", n, tc.logged, lines)
				}
			})
		}
	})

	t.Run("port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		e, err := New(Config{Listen: l.Addr().String(), Server: c.Members[1].Addr, CAFile: c.PKI.ServerCA.Cert})
		if err != nil {
			t.Fatal(err)
		}
		err = e.Start(ctx)
		if err == nil {
			_ = e.Stop(ctx)
			t.Fatal("Start succeeded on a port another listener holds")
		}
		if !strings.Contains(err.Error(), l.Addr().String()+" is taken by another process") {
			t.Errorf("Start: %v; want it to say that %s is taken by another process", err, l.Addr())
		}
	})

	t.Run("footprint", func(t *testing.T) { footprint(t, c, 50) })

	t.Run("fails over, open watches included", func(t *testing.T) {
		links := []*testlink.Link{testlink.New(t, c.Members[0].Addr), testlink.New(t, c.Members[1].Addr)}
		stateFile := filepath.Join(t.TempDir(), StateFileName)
		data, _ := json.Marshal(state{Servers: []string{links[0].Addr()}})
		if err := os.WriteFile(stateFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
		listen := freeAddr(t)
		before := endpointGoroutines(t)
		e := start(t, ctx, Config{Listen: listen, Server: links[1].Addr(), StateFile: stateFile, CAFile: c.PKI.ServerCA.Cert})
		defer stop(t, e)
		client := adminThrough(t, c, listen)
		const ns = "failover"
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		seen := make(chan string, 100)
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
		inf := factory.Core().V1().ConfigMaps().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
			seen <- obj.(*corev1.ConfigMap).Name
		}}); err != nil {
			t.Fatal(err)
		}
		ictx, icancel := context.WithCancel(ctx)
		factory.Start(ictx.Done())
		defer func() { icancel(); factory.Shutdown() }()
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("the informer through the endpoint never synced")
		}
		t.Logf("endpoint goroutines with one client: %d (before start: %d)", endpointGoroutines(t), before)
		memberOf := map[string]int{links[0].Addr(): 0, links[1].Addr(): 1}
		linkOf := map[string]*testlink.Link{links[0].Addr(): links[0], links[1].Addr(): links[1]}

		// failover waits until the watch through the endpoint sees a
		// ConfigMap created on member other after the loss of the current
		// server, and a request through the endpoint passes.
		failover := func(t *testing.T, name string, other int, lost time.Time) {
			t.Helper()
			if _, err := c.Client(t, other).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			timeout := time.After(failoverBound)
			for got := ""; got != name; {
				select {
				case got = <-seen:
				case <-timeout:
					t.Fatalf("the watch through the endpoint did not see %s within %s of the loss (current %q, up %v)", name, failoverBound, e.Current(), e.Up())
				}
			}
			watched := time.Since(lost)
			rctx, cancel := context.WithTimeout(ctx, failoverBound)
			defer cancel()
			if _, err := client.CoreV1().ConfigMaps(ns).Get(rctx, name, metav1.GetOptions{}); err != nil {
				t.Fatalf("a request through the endpoint after the loss: %v", err)
			}
			t.Logf("failover: watch event after %s, request answered after %s", watched, time.Since(lost))
		}

		// A silent death: the link to the server the watch is on goes
		// quiet (no FIN, no RST), as when its host loses power.
		first := e.Current()
		if first == "" {
			t.Fatal("no current server with a watch open")
		}
		linkOf[first].Cut()
		failover(t, "after-cut", 1-memberOf[first], time.Now())
		second := e.Current()
		if second == first {
			t.Fatalf("still on %s after its link was cut", first)
		}

		// A clean death: the server the watch is on now stops.
		linkOf[first].Heal()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return slices.Contains(e.Up(), first), nil
		}); err != nil {
			t.Fatalf("%s not up again after its link healed: %v", first, err)
		}
		lost := time.Now()
		c.Members[memberOf[second]].Stop(t)
		t.Logf("the server stopped in %s", time.Since(lost))
		failover(t, "after-stop", memberOf[first], lost)
		t.Logf("endpoint goroutines at the end: %d", endpointGoroutines(t))
	})
}

// start builds and starts an endpoint of cfg.
func start(t *testing.T, ctx context.Context, cfg Config) *Endpoint {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, e) })
	return e
}

func stop(t *testing.T, e *Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// freeAddr is a loopback address free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// adminThrough is an admin client that dials the endpoint at listen and
// verifies the servers for 127.0.0.1, as a node's kubeconfig does.
func adminThrough(t *testing.T, c *testapiserver.Cluster, listen string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("https://"+listen, c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// nodeKubeconfig writes a kubeconfig of system:node:node-a, in
// system:nodes, for server.
func nodeKubeconfig(t *testing.T, ctx context.Context, c *testapiserver.Cluster, server string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "node.kubeconfig")
	if _, err := certs.EnsureNodeClient(ctx, c.PKI, "node-a", filepath.Join(dir, "pki"), path, server); err != nil {
		t.Fatal(err)
	}
	return path
}

func nodeClient(t *testing.T, ctx context.Context, c *testapiserver.Cluster, server string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig(t, ctx, c, server))
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func readState(t *testing.T, path string, st *state) os.FileInfo {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeState(data, st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// endpointGoroutines counts the goroutines running this package's code.
func endpointGoroutines(t *testing.T) int {
	t.Helper()
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "pkg/apiendpoint.") && !strings.Contains(g, "_test.go") {
			n++
		}
	}
	return n
}
