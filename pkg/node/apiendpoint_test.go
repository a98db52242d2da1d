package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

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
