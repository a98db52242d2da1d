package logfilter

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controlplane/reconcilers"
)

// The canaries below fail once the pinned upstream stops printing what
// noise hides; then delete the entry (and the canary), as docs/RELIABILITY.md
// ("Workarounds") says.

// captureKlog returns klog's output while f runs.
func captureKlog(t *testing.T, f func()) string {
	t.Helper()
	return captureKlogLive(t, func(*lockedBuffer) { f() })
}

// captureKlogLive returns klog's output while f runs; f may read it as it
// grows.
func captureKlogLive(t *testing.T, f func(out *lockedBuffer)) string {
	t.Helper()
	fs := flagSet()
	old := fs.Lookup("logtostderr").Value.String()
	out := &lockedBuffer{}
	setFlag(t, fs, "logtostderr", "false")
	klog.SetOutput(out)
	defer func() {
		klog.SetOutput(nilWriter{})
		_ = fs.Set("logtostderr", old)
	}()
	f(out)
	klog.Flush()
	return out.String()
}

// TestCanaryMetricsAllowListError: component-base v0.37.2's metrics
// Options.Apply logs an error when no label allow-list is configured, which
// is the default, whether the mapping is nil or empty.
func TestCanaryMetricsAllowListError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mapping map[string]string
		want    string
	}{
		{"no mapping, no manifest", nil, "The manifest file is empty, ignoring."},
		{"empty mapping", map[string]string{}, "empty allow-list mapping supplied, ignoring."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := metrics.NewOptions()
			o.AllowListMapping = tc.mapping
			got := captureKlog(t, o.Apply)
			if !strings.HasPrefix(got, "E") || !strings.Contains(got, tc.want) {
				t.Fatalf("metrics Options.Apply no longer logs the error %q (output %q): drop it from logfilter's noise", tc.want, got)
			}
			if !inNoise(tc.want) {
				t.Fatalf("%q is not in noise", tc.want)
			}
		})
	}
}

// TestCanaryMasterCountStaleData: the master-count endpoint reconciler
// (kubernetes v1.37.2) answers nil to RemoveEndpoints when there are no
// endpoints at all, which the kubernetes-service controller reads as stale
// data removed, and logs as an error at every start.
func TestCanaryMasterCountStaleData(t *testing.T) {
	client := fake.NewClientset()
	r := reconcilers.NewMasterCountEndpointReconciler(1, reconcilers.NewEndpointsAdapter(client.CoreV1(), client.DiscoveryV1()))
	err := r.RemoveEndpoints("kubernetes", net.ParseIP("10.0.0.1"), []corev1.EndpointPort{{Name: "https", Port: 6443, Protocol: corev1.ProtocolTCP}})
	if err != nil {
		t.Fatalf("RemoveEndpoints with no endpoints now returns %v: the 'Found stale data' error is gone, drop it from logfilter's noise", err)
	}
	if !inNoise("Found stale data, removed previous endpoints on kubernetes service, apiserver didn't exit successfully previously") {
		t.Fatal("the stale-data message is not in noise")
	}
}

func inNoise(msg string) bool {
	for _, n := range allNoise {
		if n.matches([]byte(msg)) {
			return true
		}
	}
	return false
}

// TestCanaryNoiseSources: every noise entry that names its upstream
// statement still finds it in the pinned module. Once one is gone (the
// message changed, or upstream stopped printing it), this fails: drop or
// update the entry.
func TestCanaryNoiseSources(t *testing.T) {
	dirs := map[string]string{}
	for _, n := range append(append([]noiseEntry(nil), allNoise...), stoppingNoise...) {
		src := n.source
		if src.module == "" {
			continue
		}
		t.Run(n.text, func(t *testing.T) {
			dir, ok := dirs[src.module]
			if !ok {
				out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", src.module).Output()
				if err != nil {
					t.Fatalf("go list -m %s: %v", src.module, err)
				}
				dir = strings.TrimSpace(string(out))
				dirs[src.module] = dir
			}
			code, err := os.ReadFile(filepath.Join(dir, src.file))
			if err != nil {
				t.Fatalf("%s: %v: drop or update the noise entry %q", src.module, err, n.text)
			}
			if !strings.Contains(string(code), src.statement) {
				t.Fatalf("%s %s no longer has %s: drop or update the noise entry %q", src.module, src.file, src.statement, n.text)
			}
		})
	}
}
