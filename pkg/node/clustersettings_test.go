package node

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// testSettings are settings a server publishes.
func testSettings(cidr string) nodeconfig.Config {
	return nodeconfig.Config{ClientCA: []byte("client CA PEM\n"), ClusterDomain: "cluster.local", ClusterCIDR: cidr,
		ClusterDNS: []net.IP{net.ParseIP("10.43.0.10")}, FlannelBackend: "vxlan", KubeProxyMode: "nftables",
		NodeLeaseDuration: 40 * time.Second, LocalStoragePath: "/var/lib/edgeplane/storage"}
}

// TestKeepClusterSettings: every fetch keeps the settings on disk, 0600,
// and writes the file only when they changed.
func TestKeepClusterSettings(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := PathsIn(t.TempDir())
	client := fake.NewClientset()
	var before os.FileInfo
	for _, tc := range []struct {
		name      string
		published nodeconfig.Config
		written   bool
	}{
		{"first fetch", testSettings("10.42.0.0/16"), true},
		{"same settings", testSettings("10.42.0.0/16"), false},
		{"changed settings", testSettings("10.52.0.0/16"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := nodeconfig.Publish(ctx, client, tc.published); err != nil {
				t.Fatal(err)
			}
			if _, err := fetchCluster(ctx, []kubernetes.Interface{client}, p); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p.ClusterSettings)
			if err != nil {
				t.Fatalf("settings not kept: %v", err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, want 0600", p.ClusterSettings, fi.Mode().Perm())
			}
			if written := before == nil || !os.SameFile(before, fi); written != tc.written {
				t.Errorf("file written: %v, want %v", written, tc.written)
			}
			before = fi
			kept, err := loadClusterSettings(p)
			if err != nil || kept == nil {
				t.Fatalf("kept settings: %v, %v", kept, err)
			}
			if !reflect.DeepEqual(kept.Data(), tc.published.Data()) {
				t.Errorf("kept %+v, want the published %+v", kept, tc.published)
			}
		})
	}
}

// offlineNode is a node's directory with current credentials for server,
// whose CA file is caPEM (nil: a CA of the test's own).
func offlineNode(t *testing.T, ctx context.Context, server string, caPEM []byte) Paths {
	t.Helper()
	p := PathsIn(filepath.Join(t.TempDir(), DirName))
	pki, err := certs.Ensure(ctx, certs.Options{Dir: filepath.Join(t.TempDir(), "tls"), KubeconfigDir: t.TempDir(), APIServerPort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.EnsureNodeClient(ctx, pki, "edge-a", p.CertDir, p.Kubeconfig, server); err != nil {
		t.Fatal(err)
	}
	if caPEM == nil {
		caPEM = mustRead(t, pki.ServerCA.Cert)
	}
	if err := os.WriteFile(p.ServerCA, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// forbiddingServer is an https server that refuses every request (403),
// and its CA.
func forbiddingServer(t *testing.T) (string, []byte) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"configmaps \"edgeplane-node-config\" is forbidden: node edge-a may not read it"}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// TestStartWithoutServer: a node with current credentials and no server
// answering starts from the settings it kept, within the bound, saying so
// once; without kept settings, or with a kept file that is corrupt (said
// once, naming it), it waits for a server as before; a server that refuses
// the node ends the start, kept settings or not.
func TestStartWithoutServer(t *testing.T) {
	const offlineLine = "No API server answers: the node starts from the cluster settings kept on disk"
	const ignoredLine = "Ignoring the cluster settings kept on disk"
	forbidding, forbiddingCA := forbiddingServer(t)
	for _, tc := range []struct {
		name    string
		refuses bool   // the server answers 403
		kept    string // "valid", "corrupt" or none
		offline bool   // started from the kept settings
		wantErr string
		ignored bool // the kept file was logged as ignored
	}{
		{name: "unreachable, settings kept", kept: "valid", offline: true},
		{name: "unreachable, none kept", wantErr: "still failing"},
		{name: "unreachable, kept file corrupt", kept: "corrupt", wantErr: "still failing", ignored: true},
		{name: "refused, settings kept", refuses: true, kept: "valid", wantErr: "is forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			server, ca := closedServerURL(t), []byte(nil)
			if tc.refuses {
				server, ca = forbidding, forbiddingCA
			}
			p := offlineNode(t, ctx, server, ca)
			want := testSettings("10.42.0.0/16")
			switch tc.kept {
			case "valid":
				if err := saveClusterSettings(p, want); err != nil {
					t.Fatal(err)
				}
			case "corrupt":
				if err := os.WriteFile(p.ClusterSettings, []byte(`{"configMap":"kube-system/edgeplane-node-config","data":{"client-ca.crt":`), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// The old behaviour retries for two minutes: a few seconds
			// show it retrying.
			ctx, cancel := context.WithTimeout(ctx, offlineRound+5*time.Second)
			defer cancel()
			if !tc.offline && !tc.refuses {
				ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
			}
			j := &TokenJoin{Server: server}
			begin := time.Now()
			got, err := j.Ensure(ctx, "edge-a", p)
			took := time.Since(begin)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("start: %v, want it to start from the kept settings", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("start: %v (offline %v), want an error with %q", err, got.Offline, tc.wantErr)
			}
			if got.Offline != tc.offline {
				t.Errorf("started offline: %v, want %v", got.Offline, tc.offline)
			}
			if tc.offline {
				if took > offlineRound {
					t.Errorf("started offline after %s, want within %s", took, offlineRound)
				}
				if !reflect.DeepEqual(got.Config.Data(), want.Data()) || got.Network != (Network{FlannelBackend: "vxlan", KubeProxyMode: "nftables"}) {
					t.Errorf("cluster %+v, want the kept settings", got)
				}
				if b := mustRead(t, p.ClientCA); string(b) != string(want.ClientCA) || got.ClientCAFile != p.ClientCA {
					t.Errorf("client CA file %s holds %q, want the kept CA", got.ClientCAFile, b)
				}
			}
			buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
			if n := countLines(buf.Data(), offlineLine, p.ClusterSettings); n != btoi(tc.offline) {
				t.Errorf("%d lines %q naming the file, want %d; log:\n%s", n, offlineLine, btoi(tc.offline), buf.String())
			}
			if n := countLines(buf.Data(), ignoredLine, p.ClusterSettings); n != btoi(tc.ignored) {
				t.Errorf("%d lines %q naming the file, want %d; log:\n%s", n, ignoredLine, btoi(tc.ignored), buf.String())
			}
		})
	}
}

// countLines counts the log entries whose message starts with msg and
// that name file.
func countLines(entries []ktesting.LogEntry, msg, file string) int {
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Message, msg) {
			continue
		}
		for i := 1; i < len(e.ParameterKVList); i += 2 {
			if e.ParameterKVList[i] == file {
				n++
				break
			}
		}
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFetchRound: each server is asked once within the round's bound: a
// server that never answers costs one attempt's timeout, not the
// round's; a refusal ends the round; an answer that may pass (a server
// starting) is told from a server that cannot be reached.
func TestFetchRound(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// A server whose host takes the connection and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = silent.Close()
		<-done
		for len(accepted) > 0 {
			_ = (<-accepted).Close()
		}
	})
	starting := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`))
	}))
	t.Cleanup(starting.Close)
	forbidding, forbiddingCA := forbiddingServer(t)
	startingCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: starting.Certificate().Raw})

	answering := fake.NewClientset()
	if err := nodeconfig.Publish(ctx, answering, testSettings("10.42.0.0/16")); err != nil {
		t.Fatal(err)
	}
	clientOf := func(t *testing.T, server string, ca []byte) kubernetes.Interface {
		t.Helper()
		p := offlineNode(t, ctx, server, ca)
		if err := writeKubeconfig(p, server, p.ServerCA, filepath.Join(p.CertDir, clientCertPrefix+"-current.pem")); err != nil {
			t.Fatal(err)
		}
		c, err := kubeclient.New(p.Kubeconfig, "test", kubeclient.Steady)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const attempt, round = 300 * time.Millisecond, 2 * time.Second
	for _, tc := range []struct {
		name        string
		servers     func(t *testing.T) []kubernetes.Interface
		unreachable bool // the error is a failure to reach any
		ok          bool
		within      time.Duration
	}{
		{"silent then answering", func(t *testing.T) []kubernetes.Interface {
			return []kubernetes.Interface{clientOf(t, "https://"+silent.Addr().String(), nil), answering}
		}, false, true, round},
		{"silent and closed", func(t *testing.T) []kubernetes.Interface {
			return []kubernetes.Interface{clientOf(t, "https://"+silent.Addr().String(), nil), clientOf(t, closedServerURL(t), nil)}
		}, true, false, round},
		{"starting and closed", func(t *testing.T) []kubernetes.Interface {
			return []kubernetes.Interface{clientOf(t, closedServerURL(t), nil), clientOf(t, starting.URL, startingCA)}
		}, false, false, round},
		{"refused, then answering", func(t *testing.T) []kubernetes.Interface {
			return []kubernetes.Interface{clientOf(t, forbidding, forbiddingCA), answering}
		}, false, false, round},
		{"more silent servers than the round holds", func(t *testing.T) []kubernetes.Interface {
			var cs []kubernetes.Interface
			for range 10 {
				cs = append(cs, clientOf(t, "https://"+silent.Addr().String(), nil))
			}
			return cs
		}, true, false, round + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clients := tc.servers(t)
			begin := time.Now()
			_, err := fetchRound(ctx, clients, attempt, round)
			if took := time.Since(begin); took > tc.within {
				t.Errorf("round took %s, want within %s", took, tc.within)
			}
			if (err == nil) != tc.ok {
				t.Fatalf("round: %v, want success %v", err, tc.ok)
			}
			if err != nil && unreachable(err) != tc.unreachable {
				t.Errorf("round: %v; unreachable %v, want %v", err, unreachable(err), tc.unreachable)
			}
		})
	}
}
