package e2e

import (
	"context"
	"fmt"
	"os"
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
// RssAnon, RssFile of /proc/<pid>/status) and CPU of a server that is its
// own node, --profile small, with the part on and with
// --disable=metrics-server, each twice, interleaved (on, off, on, off). It
// checks that the part answers when on and is absent when off, and that it
// costs at most the 5 MiB of idle RSS an in-process part may (the mean of
// each pair of runs). CoreDNS is disabled in every run (no image for it
// here; the same pods run either way). Set EDGEPLANE_METRICS_FIGURES=1 to
// run it (four servers, about 16 minutes; make bench-metrics).
func TestMetricsServerFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four servers, each its own node")
	}
	if os.Getenv("EDGEPLANE_METRICS_FIGURES") == "" {
		testenv.SkipByDesign(t, "metrics-figures")
	}
	parallelNode(t)
	type figures struct{ rss, anon, file int64 }
	got := map[bool][]figures{}
	for i, on := range []bool{true, false, true, false} {
		name := fmt.Sprintf("run %d metrics-server off", i+1)
		args := []string{"--profile", "small", "--disable=coredns"}
		if on {
			name = fmt.Sprintf("run %d metrics-server on", i+1)
		} else {
			args = append(args, "--disable=metrics-server")
		}
		t.Run(name, func(t *testing.T) {
			s, _, _ := nodeServer(t, args...)
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
			got[on] = append(got[on], f)
			t.Logf("figure: %s, idle (%s after Ready, then %s): VmRSS %.1f MiB, RssAnon %.1f MiB, RssFile %.1f MiB; CPU %.2f s (%.2f%% of a core)",
				name, metricsIdleSettle, metricsIdleWindow, mib(f.rss), mib(f.anon), mib(f.file), (c1 - c0).Seconds(), 100*(c1-c0).Seconds()/metricsIdleWindow.Seconds())

			reg := apiregclient.NewForConfigOrDie(s.config)
			_, err = reg.APIServices().Get(context.Background(), "v1beta1.metrics.k8s.io", metav1.GetOptions{})
			if on {
				if err != nil {
					t.Errorf("metrics-server on: APIService: %v", err)
				}
				out, err := s.kubectl("top", "nodes", "--no-headers")
				if err != nil {
					t.Errorf("metrics-server on: kubectl top nodes: %v: %s", err, out)
				}
			} else if !apierrors.IsNotFound(err) {
				t.Errorf("--disable=metrics-server: APIService: %v, want NotFound", err)
			}
		})
	}
	if len(got[true]) != 2 || len(got[false]) != 2 {
		t.Fatalf("runs measured: on %d, off %d; want 2 each", len(got[true]), len(got[false]))
	}
	mid := func(fs []figures, pick func(figures) int64) float64 { return mib(pick(fs[0])+pick(fs[1])) / 2 }
	for _, m := range []struct {
		field string
		pick  func(figures) int64
	}{{"VmRSS", func(f figures) int64 { return f.rss }}, {"RssAnon", func(f figures) int64 { return f.anon }}, {"RssFile", func(f figures) int64 { return f.file }}} {
		on, off := mid(got[true], m.pick), mid(got[false], m.pick)
		t.Logf("figure: %s idle, mean of two runs: metrics-server on %.1f MiB, off %.1f MiB, the part %+.1f MiB", m.field, on, off, on-off)
		if m.field == "VmRSS" && on-off > 5 {
			t.Errorf("the in-process resource metrics part costs %.1f MiB of idle RSS: over the 5 MiB budget of an in-process part", on-off)
		}
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
