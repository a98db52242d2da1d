package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSmallProfile runs the control plane with --profile small: the trimmed
// settings must keep what kubectl users rely on (apply twice, explain,
// Deployments reconciled) while the OpenAPI v2 document is gone.
func TestSmallProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t)
	s := startServer(t, t.TempDir(), "--profile", "small")
	if out := s.output.String(); !strings.Contains(out, `"Starting edgeplane" logger="edgeplane" profile="small"`) {
		t.Fatalf("the start-up log does not name the small profile:\n%s", tail(out))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for path, want := range map[string]int{"/openapi/v2": http.StatusNotFound, "/openapi/v3": http.StatusOK, "/readyz": http.StatusOK} {
		var code int
		s.client.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code)
		if code != want {
			t.Errorf("GET %s = %d, want %d", path, code, want)
		}
	}

	// The API server's per-resource background work the profile turns off
	// (chain.Tuning.LeanStorage), as its own metrics report it: the gates,
	// and no object counts (polled every minute when on, first at start).
	metrics, err := s.client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	for _, gate := range []string{"ConcurrentWatchObjectDecode", "DetectCacheInconsistency", "SizeBasedListCostEstimate"} {
		want := `kubernetes_feature_enabled{name="` + gate + `",stage="BETA"} 0`
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(metrics), "\napiserver_resource_objects{") {
		t.Errorf("/metrics reports apiserver_resource_objects: the object counts are still polled")
	}

	manifest := filepath.Join(t.TempDir(), "web.yaml")
	deployment := func(replicas string) {
		t.Helper()
		doc := strings.ReplaceAll(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
`, "REPLICAS", replicas)
		if err := os.WriteFile(manifest, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		// Client-side apply computes a three-way patch from OpenAPI v3.
		if out, err := s.kubectl("apply", "-f", manifest); err != nil {
			t.Fatalf("kubectl apply (replicas %s): %v\n%s", replicas, err, out)
		}
	}
	deployment("1")
	deployment("2")
	if out, err := s.kubectl("explain", "deployment.spec.replicas"); err != nil || !strings.Contains(out, "replicas") {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "the Deployment's ReplicaSet with 2 replicas", func(ctx context.Context) (bool, error) {
		rss, err := s.client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(rss.Items) != 1 || rss.Items[0].Spec.Replicas == nil {
			return false, err
		}
		return *rss.Items[0].Spec.Replicas == 2, nil
	})
	s.stop()
}
