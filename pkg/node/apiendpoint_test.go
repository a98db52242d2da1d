package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/pkg/apicache"
)

// TestAPIEndpointKubeconfigs: the endpoint's first server is the node's
// kubeconfig's, and the parts' kubeconfig points at the endpoint with the
// node's own certificate and the cluster CA, or, with the cache, the
// cache's own CA and the cache listening there.
func TestAPIEndpointKubeconfigs(t *testing.T) {
	for _, tc := range []struct {
		server, want, wantErr string
		port                  int // --lb-server-port (0: the default)
		wantLocal             string
	}{
		{server: "https://10.0.0.1:6443", want: "10.0.0.1:6443", wantLocal: "https://127.0.0.1:6444"},
		{server: "https://server.example", want: "server.example:443", port: 7444, wantLocal: "https://127.0.0.1:7444"},
		{server: "https://[fd00::1]:6443", want: "[fd00::1]:6443", wantLocal: "https://127.0.0.1:6444"},
		{server: "http://10.0.0.1:6443", wantErr: `server "http://10.0.0.1:6443" is not an https URL`},
	} {
		for _, cache := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cache=%v", tc.server, cache), func(t *testing.T) {
				p := PathsIn(t.TempDir())
				cert := filepath.Join(p.CertDir, "kubelet-client-current.pem")
				if err := writeKubeconfig(p, tc.server, p.ServerCA, cert); err != nil {
					t.Fatal(err)
				}
				server, _, err := kubeconfigServer(p.Kubeconfig)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err %v, want %q", err, tc.wantErr)
					}
					return
				}
				if err != nil || server != tc.want {
					t.Fatalf("server %q (err %v), want %q", server, err, tc.want)
				}
				if err := os.WriteFile(p.ServerCA, selfSigned(t, time.Now().Add(-1), time.Now().Add(1e12)), 0o600); err != nil {
					t.Fatal(err)
				}
				e, c, local, err := apiEndpoint("node-a", p, tc.port, cache)
				if err != nil {
					t.Fatal(err)
				}
				wantCA, addr := p.ServerCA, e.Address()
				if cache {
					if c == nil {
						t.Fatal("no cache")
					}
					wantCA, addr = apicache.LocalCAFile(p.APICache), c.Address()
				} else if c != nil {
					t.Fatal("a cache that is off")
				}
				cfg, err := clientcmd.LoadFromFile(local.Kubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				cur := cfg.Contexts[cfg.CurrentContext]
				cl, u := cfg.Clusters[cur.Cluster], cfg.AuthInfos[cur.AuthInfo]
				if cl.Server != tc.wantLocal || cl.CertificateAuthority != wantCA || u.ClientCertificate != cert || u.ClientKey != cert {
					t.Errorf("%s: server %s, CA %s, cert %s, key %s; want the endpoint, %s and %s", local.Kubeconfig, cl.Server, cl.CertificateAuthority, u.ClientCertificate, u.ClientKey, wantCA, cert)
				}
				if got := "https://" + addr; got != tc.wantLocal {
					t.Errorf("the endpoint listens on %s, want %s", got, tc.wantLocal)
				}
				if local.Kubeconfig != p.LocalKubeconfig {
					t.Errorf("the parts' kubeconfig is %s, want %s", local.Kubeconfig, p.LocalKubeconfig)
				}
			})
		}
	}
}

// TestEndpointPartsOrder: with the cache, it starts before the endpoint
// and writes the CA the parts' kubeconfig names before the endpoint's own
// watch reads that kubeconfig (the other order ended agents at start when
// the watch won the race).
func TestEndpointPartsOrder(t *testing.T) {
	for _, cache := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			p := PathsIn(t.TempDir())
			cert := filepath.Join(p.CertDir, "kubelet-client-current.pem")
			if err := writeKubeconfig(p, "https://10.0.0.1:6443", p.ServerCA, cert); err != nil {
				t.Fatal(err)
			}
			ca := selfSigned(t, time.Now().Add(-1), time.Now().Add(1e12))
			if err := os.MkdirAll(p.CertDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{p.ServerCA, p.ClientCA, cert} {
				if err := os.WriteFile(f, ca, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			parts, e, local, err := endpointParts("node-a", p, freePort(t), cache)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range parts {
				names = append(names, c.Name())
			}
			want := []string{PartAPIEndpoint}
			if cache {
				want = []string{PartAPICache, PartAPIEndpoint}
			}
			if !slices.Equal(names, want) || parts[len(parts)-1] != component.Component(e) {
				t.Fatalf("parts %v, want %v", names, want)
			}
			ctx := context.Background()
			if err := parts[0].Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer parts[0].Stop(ctx)
			if _, err := clientcmd.BuildConfigFromFlags("", local.Kubeconfig); err != nil && cache {
				t.Fatalf("once the first part started, the parts' kubeconfig does not load: %v", err)
			}
		})
	}
}

// freePort is a port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
