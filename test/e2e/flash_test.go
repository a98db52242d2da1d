package e2e

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/edgeplane/edgeplane/internal/procfs"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// Idle-write budget for the CI window. The default target is under 1 MB an
// hour; one 10-second writer brought back (an identity lease, the lease
// endpoint reconciler) costs about 700 KB a minute, so this bound is generous
// yet catches any such regression.
const (
	idleSettle      = 30 * time.Second
	idleWindow      = 60 * time.Second
	idleWindowBound = 256 << 10
)

// TestFlashFriendlyIdle checks that an idle server writes almost nothing,
// measured by its own edgeplane_process_disk_written_bytes_total metric, and
// that the single-server settings behind that keep the cluster correct.
func TestFlashFriendlyIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real server for a minute and a half")
	}
	parallelSubtests(t)
	advertise, err := utilnet.ChooseHostInterface()
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			parallel(t, 100*time.Second)
			// Scheduled snapshots off: the default schedule saves one at 00:00
			// and 12:00 (a write by design), which a window over either would
			// count.
			// Every address: a loopback-bound server publishes no endpoint
			// for the kubernetes Service (pkg/bootstrap/apiendpoint.go).
			s := startServer(t, t.TempDir(), "--datastore", ds, "--snapshot-schedule", "", "--bind-address", "0.0.0.0")
			ctx := context.Background()
			binaryPagesAtReady := binaryPages(t, s)

			t.Run("kubernetes endpoints list the advertise address", func(t *testing.T) {
				eventually(t, 30*time.Second, "the kubernetes EndpointSlice", func(ctx context.Context) (bool, error) {
					slice, err := s.client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					return len(slice.Endpoints) == 1 && len(slice.Endpoints[0].Addresses) == 1 &&
						slice.Endpoints[0].Addresses[0] == advertise.String(), nil
				})
				ep, err := s.client.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || ep.Subsets[0].Addresses[0].IP != advertise.String() {
					t.Fatalf("kubernetes Endpoints = %+v, want only %s", ep.Subsets, advertise)
				}
			})

			t.Run("no 10-second writers are left", func(t *testing.T) {
				leases, err := s.client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity"})
				if err != nil {
					t.Fatal(err)
				}
				if len(leases.Items) != 0 {
					t.Errorf("apiserver identity leases exist: %d", len(leases.Items))
				}
			})

			t.Run("idle writes stay under the bound", func(t *testing.T) {
				// Let start-up writes (bootstrap objects, the first compaction) settle.
				s.idle(idleSettle)
				before := writtenBytes(t, s)
				lines := strings.Count(s.output.String(), "\n")
				s.idle(idleWindow)
				after := writtenBytes(t, s)
				written := after - before
				t.Logf("%s: %d bytes written in %s idle (%.2f MB/h)", ds, written, idleWindow, float64(written)*float64(time.Hour/idleWindow)/1e6)
				if written > idleWindowBound {
					t.Errorf("%d bytes written in %s idle, bound %d", written, idleWindow, idleWindowBound)
				}
				// Logs land on the same card: nothing at the default verbosity while idle.
				if extra := strings.Count(s.output.String(), "\n") - lines; extra > 0 {
					logged := s.output.String()
					t.Errorf("%d log lines while idle:\n%s", extra, tail(logged[len(logged)-min(len(logged), 2000):]))
				}
			})
			// By now (90 s idle) the server has released the binary's pages
			// that only start-up used, 30 s after ready (pkg/bootstrap).
			t.Run("the binary's start-up pages are released", func(t *testing.T) {
				after := binaryPages(t, s)
				t.Logf("file-backed RSS %d MiB at ready, %d MiB after the idle window", binaryPagesAtReady>>20, after>>20)
				if after > binaryPagesAtReady*85/100 {
					t.Errorf("file-backed RSS %d MiB at ready and %d MiB after the idle window: the start-up pages were not released",
						binaryPagesAtReady>>20, after>>20)
				}
			})
			s.stop()
		})
	}
}

// binaryPages is the server's file-backed resident memory: almost all of it
// is its binary's pages.
func binaryPages(t *testing.T, s *server) int64 {
	t.Helper()
	v, err := procfs.StatusBytes(s.cmd.Process.Pid, "RssFile")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// idle leaves the server alone for d, failing at once if it exits meanwhile.
func (s *server) idle(d time.Duration) {
	s.t.Helper()
	select {
	case <-time.After(d):
	case <-s.exited:
		s.t.Fatalf("edgeplane exited while idle (%v):\n%s", s.exitErr, tail(s.output.String()))
	}
}

// writtenBytes reads edgeplane_process_disk_written_bytes_total from /metrics.
func writtenBytes(t *testing.T, s *server) int64 {
	t.Helper()
	raw, err := s.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "edgeplane_process_disk_written_bytes_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("parse %q: %v", sc.Text(), err)
			}
			return int64(f)
		}
	}
	t.Fatal("/metrics has no edgeplane_process_disk_written_bytes_total")
	return 0
}
