package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// metricsIdleSettle and metricsIdleWindow: a server is left alone for
// metricsIdleSettle after its node is Ready (start-up pages released, the
// scraper on its 15 s beat), then its CPU is read over metricsIdleWindow
// and its RSS at the window's end.
const (
	metricsIdleSettle = time.Minute
	metricsIdleWindow = 2 * time.Minute
)

// TestMetricsServerFigures measures what the in-process resource metrics
// API costs (docs/ADDONS.md "Resource metrics"): the idle RSS (VmRSS,
// RssAnon, RssFile of /proc/<pid>/status) and CPU of a server, --profile
// small, with the part on and with --disable=metrics-server, each twice
// (on, off, on, off). It checks that the part answers when on and is absent
// when off, and that it costs at most the 5 MiB of idle RSS an in-process
// part may (the mean of each pair of runs).
//
// EDGEPLANE_METRICS_FIGURES=1 (make bench-metrics) runs the servers one
// after another, each its own node (CoreDNS disabled: no image for it
// here; the same pods run either way), about 16 minutes.
// EDGEPLANE_METRICS_FIGURES=control-plane runs them side by side without a
// node (nothing to scrape: the part's fixed cost), about 4 minutes.
func TestMetricsServerFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four servers")
	}
	mode := os.Getenv("EDGEPLANE_METRICS_FIGURES")
	if mode == "" {
		testenv.SkipByDesign(t, "metrics-figures")
	}
	asNode := mode != "control-plane"
	if asNode {
		parallelNode(t)
	} else {
		parallelSubtests(t)
	}
	type figures struct{ rss, anon, file int64 }
	var mu sync.Mutex
	got := map[bool][]figures{}
	t.Run("runs", func(t *testing.T) {
		for i, on := range []bool{true, false, true, false} {
			name := fmt.Sprintf("run %d metrics-server off", i+1)
			args := []string{"--profile", "small"}
			if on {
				name = fmt.Sprintf("run %d metrics-server on", i+1)
			} else {
				args = append(args, "--disable=metrics-server")
			}
			t.Run(name, func(t *testing.T) {
				var s *server
				if asNode {
					s, _, _ = nodeServer(t, append(args, "--disable=coredns")...)
				} else {
					parallel(t)
					s = startServer(t, t.TempDir(), args...)
				}
				defer s.stop()
				pid := s.cmd.Process.Pid
				time.Sleep(metricsIdleSettle) // the idle time measured, not a wait for a condition
				c0, err := procfs.CPUTime(pid)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(metricsIdleWindow)
				c1, err := procfs.CPUTime(pid)
				if err != nil {
					t.Fatal(err)
				}
				var f figures
				for field, v := range map[string]*int64{"VmRSS": &f.rss, "RssAnon": &f.anon, "RssFile": &f.file} {
					if *v, err = procfs.StatusBytes(pid, field); err != nil {
						t.Fatal(err)
					}
				}
				mu.Lock()
				got[on] = append(got[on], f)
				mu.Unlock()
				t.Logf("figure: %s (%s), idle (%s after ready, then %s): VmRSS %.1f MiB, RssAnon %.1f MiB, RssFile %.1f MiB; CPU %.2f s (%.2f%% of a core)",
					name, mode, metricsIdleSettle, metricsIdleWindow, mib(f.rss), mib(f.anon), mib(f.file), (c1 - c0).Seconds(), 100*(c1-c0).Seconds()/metricsIdleWindow.Seconds())

				ctx := context.Background()
				_, err = apiregclient.NewForConfigOrDie(s.config).APIServices().Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
				if !on {
					if !apierrors.IsNotFound(err) {
						t.Errorf("--disable=metrics-server: APIService: %v, want NotFound", err)
					}
					return
				}
				if err != nil {
					t.Errorf("metrics-server on: APIService: %v", err)
				}
				if body, err := s.client.RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes").DoRaw(ctx); err != nil {
					t.Errorf("metrics-server on: GET nodes.metrics.k8s.io: %v: %s", err, body)
				}
				if asNode {
					if out, err := topTable("kubectl", "--kubeconfig", s.kubeconfig, "top", "nodes"); err != nil {
						t.Errorf("metrics-server on: %v", err)
					} else if rows, err := topRows(out); err != nil || len(rows) != 1 {
						t.Errorf("metrics-server on: kubectl top nodes: %v:\n%s", err, out)
					}
				}
			})
		}
	})
	if len(got[true]) != 2 || len(got[false]) != 2 {
		t.Fatalf("runs measured: on %d, off %d; want 2 each", len(got[true]), len(got[false]))
	}
	mean := func(fs []figures, pick func(figures) int64) float64 { return mib(pick(fs[0])+pick(fs[1])) / 2 }
	for _, m := range []struct {
		field string
		pick  func(figures) int64
	}{{"VmRSS", func(f figures) int64 { return f.rss }}, {"RssAnon", func(f figures) int64 { return f.anon }}, {"RssFile", func(f figures) int64 { return f.file }}} {
		on, off := mean(got[true], m.pick), mean(got[false], m.pick)
		t.Logf("figure: %s (%s) idle, mean of two runs: metrics-server on %.1f MiB, off %.1f MiB, the part %+.1f MiB", m.field, mode, on, off, on-off)
		if m.field == "VmRSS" && on-off > 5 {
			t.Errorf("the in-process resource metrics part costs %.1f MiB of idle RSS: over the 5 MiB budget of an in-process part", on-off)
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
