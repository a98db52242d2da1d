package chain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCanaryUpstreamHooksWaitFirst: upstream's two bootstrap hooks (RBAC
// roles, system priority classes; k8s.io/kubernetes v1.37.2) start with
// wait.Poll(1*time.Second, ...), which sleeps a second before the first
// attempt; bootstraphooks.go replaces them with hooks that try at once. Once
// upstream tries at once too, this fails: drop bootstraphooks.go and its
// entry in docs/RELIABILITY.md ("Workarounds").
func TestCanaryUpstreamHooksWaitFirst(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/kubernetes: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	for _, file := range []string{"pkg/registry/rbac/rest/storage_rbac.go", "pkg/registry/scheduling/rest/storage_scheduling.go"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), "wait.Poll(1*time.Second, 30*time.Second,") {
				t.Fatalf("upstream %s no longer waits a second before its first attempt: bootstraphooks.go may go", file)
			}
		})
	}
}

// TestCanaryLegacyTokenTrackingRace: upstream's legacy token tracking hook
// (k8s.io/kubernetes v1.37.2) starts its controller at once, racing the
// system namespaces controller's creation of kube-system; systemnamespace.go
// replaces it with a hook that ensures kube-system first. Once upstream's
// hook does anything before it starts the controller, this fails: see
// whether systemnamespace.go may go.
func TestCanaryLegacyTokenTrackingRace(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/kubernetes: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg/controlplane/apiserver/server.go"))
	if err != nil {
		t.Fatal(err)
	}
	const hook = `AddPostStartHookOrDie("` + upstreamLegacyTokenTrackingHook + `", func(hookContext genericapiserver.PostStartHookContext) error {
		go legacytokentracking.NewController(client).RunWithContext(hookContext)
		return nil
	})`
	if !strings.Contains(string(src), hook) {
		t.Fatalf("upstream's %s hook changed: check whether it still races kube-system's creation, and whether systemnamespace.go may go", upstreamLegacyTokenTrackingHook)
	}
}
