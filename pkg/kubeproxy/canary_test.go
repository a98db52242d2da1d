package kubeproxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCanaryUpstreamRunNeverStops: upstream's ProxyServer.Run
// (k8s.io/kubernetes v1.37.2 cmd/kube-proxy/app/server.go) starts its
// informers with wait.NeverStop and its sync loop with no way to end it, so
// a stopped kube-proxy's goroutines stay until the process ends (the
// package comment and docs/RELIABILITY.md say so). Once upstream stops them
// with Run's context, this fails: Stop then ends them too, and the docs'
// entry goes.
func TestCanaryUpstreamRunNeverStops(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/kubernetes: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "cmd", "kube-proxy", "app", "server.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"informerFactory.Start(wait.NeverStop)", "go s.Proxier.SyncLoop()"} {
		if !strings.Contains(string(src), s) {
			t.Errorf("upstream's ProxyServer.Run no longer has %q: check whether it now ends with its context", s)
		}
	}
}
