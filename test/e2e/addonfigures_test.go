package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// addonFiguresEnv turns TestAddonFigures on: a comma list of the
// configurations to measure, one after another: "all" (every add-on on),
// "none" (the four of addonParts off), or one of addonParts (that part
// off, the others on). addonFiguresIdleEnv is each server's measured idle
// window (a Go duration; default 2m).
const (
	addonFiguresEnv     = "EDGEPLANE_ADDON_FIGURES"
	addonFiguresIdleEnv = "EDGEPLANE_ADDON_FIGURES_IDLE"
)

// addonParts are the --disable names of the application add-ons: local
// volumes, resource metrics, Helm charts, ingress.
var addonParts = []string{"local-storage", "metrics-server", "helm-controller", "ingress"}

// addonSettle is how long a server is left alone after its node is Ready
// before the window: start-up's writes and pages settle, and the kernel's
// writeback (30 s) of start-up's dirty pages has run.
const addonSettle = 75 * time.Second

// TestAddonFigures measures what the application add-ons cost a server
// that is its own node (--profile small; CoreDNS off, as it has no image
// here, in every configuration): after addonSettle, the bytes the server
// process wrote to storage over the idle window (write_bytes of
// /proc/<pid>/io: a page counts when it turns dirty, less
// cancelled_write_bytes), its CPU over the window, and the medians of
// VmRSS, RssAnon and RssFile of /proc/<pid>/status read every 10 s over
// the window. It checks that each
// configuration has the parts it should (the StorageClass, the metrics
// APIService, the HelmChart CRD, the IngressClass), and, when "all" and
// "none" are both measured, that all parts on write at most 10% more than
// all four off (issue 44's bound on idle disk writes).
//
// A measurement: opt-in (EDGEPLANE_ADDON_FIGURES=all,none; about 4 minutes
// per configuration with a 2-minute window), under the e2e lock.
func TestAddonFigures(t *testing.T) {
	spec := os.Getenv(addonFiguresEnv)
	if spec == "" {
		testenv.SkipByDesign(t, "addon-figures")
	}
	idle := 2 * time.Minute
	if v := os.Getenv(addonFiguresIdleEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 30*time.Second {
			t.Fatalf("%s=%q: want an idle window of 30s or more, such as 2m", addonFiguresIdleEnv, v)
		}
		idle = d
	}
	var configs []string
	for _, c := range strings.Split(spec, ",") {
		c = strings.TrimSpace(c)
		if c != "all" && c != "none" && !slices.Contains(addonParts, c) {
			t.Fatalf("%s: %q is not all, none or one of %v", addonFiguresEnv, c, addonParts)
		}
		configs = append(configs, c)
	}
	parallelNode(t)

	written := map[string]int64{}
	for _, config := range configs {
		t.Run(config, func(t *testing.T) {
			args := []string{"--profile", "small", "--disable=coredns"}
			off := map[string]bool{}
			switch config {
			case "all":
			case "none":
				args = append(args, "--disable="+strings.Join(addonParts, ","))
				for _, p := range addonParts {
					off[p] = true
				}
			default:
				args = append(args, "--disable="+config)
				off[config] = true
			}
			s, _, _ := nodeServer(t, args...)
			defer s.stop()
			pid := s.cmd.Process.Pid
			checkAddonParts(t, s, off)

			time.Sleep(addonSettle) // the idle time measured, not a wait for a condition
			io0, err := procfs.ReadIO(pid)
			if err != nil {
				t.Fatal(err)
			}
			c0, err := procfs.CPUTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			// RSS every 10 s over the window, medians: one sample moves by
			// a few MiB with the garbage collector's timing.
			samples := map[string][]int64{}
			for began := time.Now(); time.Since(began) < idle; {
				time.Sleep(10 * time.Second) // the sampling interval of the idle window measured
				for _, f := range []string{"VmRSS", "RssAnon", "RssFile"} {
					v, err := procfs.StatusBytes(pid, f)
					if err != nil {
						t.Fatal(err)
					}
					samples[f] = append(samples[f], v)
				}
			}
			io1, err := procfs.ReadIO(pid)
			if err != nil {
				t.Fatal(err)
			}
			c1, err := procfs.CPUTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			var rss [3]int64
			for i, f := range []string{"VmRSS", "RssAnon", "RssFile"} {
				slices.Sort(samples[f])
				rss[i] = samples[f][len(samples[f])/2]
			}
			w := (io1.WriteBytes - io1.CancelledWriteBytes) - (io0.WriteBytes - io0.CancelledWriteBytes)
			written[config] = w
			t.Logf("figure: %s (%s): idle %s after %s: written %.1f KiB (%.1f KiB/min), wchar %.1f KiB; CPU %.2f%% of a core; medians of %d samples: VmRSS %.1f MiB, RssAnon %.1f MiB, RssFile %.1f MiB",
				config, strings.Join(args, " "), idle, addonSettle, float64(w)/1024, float64(w)/1024/idle.Minutes(),
				float64(io1.WChar-io0.WChar)/1024, 100*(c1-c0).Seconds()/idle.Seconds(), len(samples["VmRSS"]), mib(rss[0]), mib(rss[1]), mib(rss[2]))
			checkAddonParts(t, s, off) // still as they were: nothing came or went while idle
		})
	}
	on, okOn := written["all"]
	none, okNone := written["none"]
	if okOn && okNone {
		t.Logf("figure: idle disk writes, all parts on %d B, all four off %d B: %+.1f%%", on, none, 100*float64(on-none)/float64(none))
		if float64(on) > 1.1*float64(none) {
			t.Errorf("idle writes with every add-on on (%d B) are more than 10%% above those with the four off (%d B)", on, none)
		}
	}
}

// checkAddonParts checks that what each part makes is there when it is on
// (the helm-controller's CRDs and the packaged IngressClass come in the
// background: within a minute) and absent when off.
func checkAddonParts(t *testing.T, s *server, off map[string]bool) {
	t.Helper()
	gets := map[string]func(ctx context.Context) error{
		"local-storage": func(ctx context.Context) error {
			_, err := s.client.StorageV1().StorageClasses().Get(ctx, "local-path", metav1.GetOptions{})
			return err
		},
		"metrics-server": func(ctx context.Context) error {
			_, err := apiregclient.NewForConfigOrDie(s.config).APIServices().Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
			return err
		},
		"helm-controller": func(ctx context.Context) error {
			_, err := s.client.Discovery().ServerResourcesForGroupVersion("helm.cattle.io/v1")
			return err
		},
		"ingress": func(ctx context.Context) error {
			_, err := s.client.NetworkingV1().IngressClasses().Get(ctx, "edgeplane", metav1.GetOptions{})
			return err
		},
	}
	for _, part := range addonParts {
		if off[part] {
			if err := gets[part](context.Background()); !apierrors.IsNotFound(err) {
				t.Errorf("--disable=%s: %v, want NotFound", part, err)
			}
			continue
		}
		eventually(t, time.Minute, part+"'s object", func(ctx context.Context) (bool, error) {
			err := gets[part](ctx)
			return err == nil, err
		})
	}
}
