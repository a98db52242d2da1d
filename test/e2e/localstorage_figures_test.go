package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// localStorageIdle is how long a measured server idles once it is ready
// (and its Node Ready, as a node) before its memory is read.
const localStorageIdle = 3 * time.Minute

// TestLocalStorageFigures measures what local storage costs an idle
// server with --profile small: VmRSS, RssAnon and RssFile of
// /proc/<pid>/status after localStorageIdle, with the part on and with
// --disable=local-storage, alternately. Set EDGEPLANE_LOCALSTORAGE_FIGURES
// to "node" (a server that is its own node: the provisioner and the node
// part; run it under the e2e lock) or "control-plane" (no node: the
// provisioner alone), with ":<pairs>" for other than two on/off pairs
// (each server about four minutes).
func TestLocalStorageFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers, each idle for minutes")
	}
	mode, n, _ := strings.Cut(os.Getenv("EDGEPLANE_LOCALSTORAGE_FIGURES"), ":")
	pairs := 2
	if n != "" {
		var err error
		if pairs, err = strconv.Atoi(n); err != nil || pairs < 1 {
			t.Fatalf("EDGEPLANE_LOCALSTORAGE_FIGURES=%s: want node or control-plane, then optionally :<pairs> (a number from 1)", os.Getenv("EDGEPLANE_LOCALSTORAGE_FIGURES"))
		}
	}
	switch mode {
	case "node", "control-plane":
	case "":
		testenv.SkipByDesign(t, "local-storage-figures")
	default:
		t.Fatalf("EDGEPLANE_LOCALSTORAGE_FIGURES=%s: want node or control-plane", mode)
	}
	if mode == "node" {
		parallelNode(t)
	} else {
		parallel(t)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	type figures struct{ rss, anon, file int64 }
	got := map[bool][]figures{}
	for i := range 2 * pairs {
		on := i%2 == 0
		name, args := fmt.Sprintf("%s run %d local storage on", mode, i+1), []string{"--profile", "small", "--disable=coredns"}
		if !on {
			name, args = fmt.Sprintf("%s run %d local storage off", mode, i+1), append(args, "--disable=local-storage")
		}
		t.Run(name, func(t *testing.T) {
			var s *server
			if mode == "node" {
				s, _, _ = nodeServer(t, args...)
			} else {
				s = startServer(t, t.TempDir(), args...)
			}
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
			t.Logf("figure: %s, %s idle after ready: VmRSS %.1f MiB, RssAnon %.1f MiB, RssFile %.1f MiB",
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
		t.Logf("figure: %s %s mean of %d: on %.1f MiB, off %.1f MiB, on - off %+.1f MiB", mode, m.field, pairs, on, off, on-off)
	}
}
