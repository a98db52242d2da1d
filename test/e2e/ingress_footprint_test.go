package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// footprintEnv turns TestIngressFootprint on; its value is how long each
// server stays idle before the samples (a Go duration, e.g. 3m).
const footprintEnv = "EDGEPLANE_INGRESS_FOOTPRINT"

// TestIngressFootprint measures the idle memory of a server that is its
// own node with --profile small, with the Ingress controller and with
// --disable=ingress, one after the other: each idles for the duration in
// EDGEPLANE_INGRESS_FOOTPRINT, then VmRSS, RssAnon and RssFile of
// /proc/<pid>/status are read every 5 s for a minute; the medians are
// logged. A measurement, not a check: opt-in, and it asserts only that the
// samples were taken.
func TestIngressFootprint(t *testing.T) {
	idle, err := time.ParseDuration(os.Getenv(footprintEnv))
	if err != nil {
		if os.Getenv(footprintEnv) != "" {
			t.Fatalf("%s=%q: want an idle duration such as 3m", footprintEnv, os.Getenv(footprintEnv))
		}
		testenv.SkipByDesign(t, "ingress-footprint")
	}
	parallelNode(t)
	var lines []string
	for _, variant := range []struct {
		name string
		args []string
	}{
		{"ingress on", nil},
		{"--disable=ingress", []string{"--disable=ingress"}},
	} {
		s, _, _ := nodeServer(t, append([]string{"--profile", "small"}, variant.args...)...)
		pid := s.cmd.Process.Pid
		began := time.Now()
		eventually(t, idle+time.Minute, "the idle time", func(context.Context) (bool, error) {
			return time.Since(began) > idle, nil
		})
		samples := map[string][]int64{}
		for range 12 {
			for _, f := range []string{"VmRSS", "RssAnon", "RssFile"} {
				v, err := procfs.StatusBytes(pid, f)
				if err != nil {
					t.Fatal(err)
				}
				samples[f] = append(samples[f], v)
			}
			time.Sleep(5 * time.Second) // a measurement's sampling interval, not a wait for a condition
		}
		line := variant.name + ":"
		for _, f := range []string{"VmRSS", "RssAnon", "RssFile"} {
			slices.Sort(samples[f])
			line += fmt.Sprintf(" %s %.1f MiB", f, float64(samples[f][len(samples[f])/2])/(1<<20))
		}
		lines = append(lines, line)
		s.stop()
	}
	for _, l := range lines {
		t.Log(l)
	}
}
