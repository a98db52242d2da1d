package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// localStorageIdle is how long a measured server idles after its node is
// Ready before its memory is read.
const localStorageIdle = 3 * time.Minute

// TestLocalStorageFigures measures what local storage costs an idle
// server that is its own node with --profile small: VmRSS, RssAnon and
// RssFile of /proc/<pid>/status after localStorageIdle, with the part on
// and with --disable=local-storage, alternately. Set
// EDGEPLANE_LOCALSTORAGE_FIGURES to the number of on/off pairs (1: two
// servers, about eight minutes).
func TestLocalStorageFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers that are their own nodes, each idle for minutes")
	}
	pairs, err := strconv.Atoi(os.Getenv("EDGEPLANE_LOCALSTORAGE_FIGURES"))
	if err != nil || pairs < 1 {
		testenv.SkipByDesign(t, "local-storage-figures")
	}
	parallelNode(t)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	type figures struct{ rss, anon, file int64 }
	got := map[bool][]figures{}
	for i := range 2 * pairs {
		on := i%2 == 0
		name, args := fmt.Sprintf("run %d local storage on", i+1), []string{"--profile", "small", "--disable=coredns"}
		if !on {
			name, args = fmt.Sprintf("run %d local storage off", i+1), append(args, "--disable=local-storage")
		}
		t.Run(name, func(t *testing.T) {
			s, _, _ := nodeServer(t, args...)
			defer s.stop()
			_, err := s.client.StorageV1().StorageClasses().Get(context.Background(), localPathClass, metav1.GetOptions{})
			if on && err != nil {
				t.Fatalf("local storage on: StorageClass %s: %v", localPathClass, err)
			}
			if !on && !apierrors.IsNotFound(err) {
				t.Fatalf("--disable=local-storage: StorageClass %s: %v, want NotFound", localPathClass, err)
			}
			time.Sleep(localStorageIdle) // the idle time measured, not a wait for a condition
			var f figures
			for field, v := range map[string]*int64{"VmRSS": &f.rss, "RssAnon": &f.anon, "RssFile": &f.file} {
				if *v, err = procfs.StatusBytes(s.cmd.Process.Pid, field); err != nil {
					t.Fatal(err)
				}
			}
			got[on] = append(got[on], f)
			t.Logf("figure: %s, %s idle after the node is Ready: VmRSS %.1f MiB, RssAnon %.1f MiB, RssFile %.1f MiB",
				name, localStorageIdle, mib(f.rss), mib(f.anon), mib(f.file))
		})
	}
	mean := func(fs []figures, pick func(figures) int64) float64 {
		var sum int64
		for _, f := range fs {
			sum += pick(f)
		}
		return mib(sum) / float64(len(fs))
	}
	if len(got[true]) != pairs || len(got[false]) != pairs {
		t.Fatalf("runs measured: on %d, off %d; want %d each", len(got[true]), len(got[false]), pairs)
	}
	for _, m := range []struct {
		field string
		pick  func(figures) int64
	}{{"VmRSS", func(f figures) int64 { return f.rss }}, {"RssAnon", func(f figures) int64 { return f.anon }}, {"RssFile", func(f figures) int64 { return f.file }}} {
		on, off := mean(got[true], m.pick), mean(got[false], m.pick)
		t.Logf("figure: %s mean of %d: on %.1f MiB, off %.1f MiB, on - off %+.1f MiB", m.field, pairs, on, off, on-off)
	}
}
