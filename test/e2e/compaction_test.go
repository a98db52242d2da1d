package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCompactionExpiresContinueTokens checks upstream's promise about list
// chunking on both datastores (the conformance spec "should support
// continue listing from the last key if the original version has been
// compacted away"): a continue token followed by a change gets 410 Gone
// within two compaction intervals, plus up to the 15 s in which upstream's
// watch cache polls the
// store's compaction revision (cacher's compactorPollPeriod: a continue
// list is served from the cache's snapshots, which it drops only then).
// Then it checks that an idle server's compactions write nothing: once the
// start-up writes are over, the datastore's revision stands still over a
// whole idle window of twenty intervals.
func TestCompactionExpiresContinueTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallelSubtests(t)
	const interval = 3 * time.Second
	const idleWindow = 20 * interval
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			parallel(t, 110*time.Second)
			s := startServer(t, t.TempDir(), "--datastore", ds, "--compaction-interval", interval.String(), "--disable=coredns")
			ctx := context.Background()
			cms := s.client.CoreV1().ConfigMaps("default")
			for i := range 4 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("chunk-%d", i)}}
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			first, err := cms.List(ctx, metav1.ListOptions{Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if first.Continue == "" {
				t.Fatalf("a list of 2 of 4 ConfigMaps has no continue token (%d items)", len(first.Items))
			}
			// A change after the token: a token issued at the compactor's
			// own record on a datastore that then stays idle never expires
			// (pkg/chain/compaction.go: nothing changed, the list it
			// continues is still consistent), and a pass landing between
			// the creates above and the list issues it there.
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-the-token"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			issued := time.Now()

			// Two intervals, the watch cache's 15 s poll, and slack
			// for a loaded host.
			deadline := issued.Add(2*interval + 15*time.Second + 5*time.Second)
			var expired time.Duration
			for time.Now().Before(deadline) {
				_, err := cms.List(ctx, metav1.ListOptions{Limit: 2, Continue: first.Continue})
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					expired = time.Since(issued)
					break
				}
				if err != nil {
					t.Fatalf("list with the continue token: %v", err)
				}
				time.Sleep(250 * time.Millisecond)
			}
			if expired == 0 {
				t.Fatalf("the continue token still works %s after it was issued (--compaction-interval %s): upstream expires it within two intervals and its watch cache's 15 s poll", time.Since(issued).Round(time.Second), interval)
			}
			t.Logf("%s: the continue token expired %s after it was issued (interval %s)", ds, expired.Round(100*time.Millisecond), interval)

			// The idle check. First the start-up writes must be over:
			// one more pass records the compaction that expired the
			// token and compacts to it, and on a loaded host the
			// controllers' first syncs can still come now. The server runs
			// without CoreDNS, so no pods wait for a node and no events
			// about them repeat. Settled means the revision stood still
			// over three intervals, which must come within a minute.
			time.Sleep(interval + time.Second)
			var settled string
			for settleBy := time.Now().Add(time.Minute); ; {
				before := revision(ctx, t, s)
				time.Sleep(3 * interval)
				after := revision(ctx, t, s)
				if after == before {
					settled = after
					break
				}
				if time.Now().After(settleBy) {
					t.Fatalf("an idle server's datastore moved from revision %s to %s over three compaction intervals, and in every such window for a minute: idle compactions must write nothing", before, after)
				}
				t.Logf("%s: the revision moved from %s to %s over three compaction intervals; trying another window", ds, before, after)
			}
			// Then the whole idle window: read once an interval, the
			// revision must stay where it settled. A compaction that writes
			// now and then (every fifth pass, say), or any other periodic
			// writer, moves it within the window, where one quiet
			// three-interval window could miss it.
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for begin := time.Now(); time.Since(begin) < idleWindow; {
				<-tick.C
				if rev := revision(ctx, t, s); rev != settled {
					t.Fatalf("an idle server's datastore moved from revision %s to %s %s into an idle window of %s (--compaction-interval %s): idle compactions must write nothing",
						settled, rev, time.Since(begin).Round(time.Second), idleWindow, interval)
				}
			}
			t.Logf("%s: the revision stood at %s over an idle window of %s", ds, settled, idleWindow)
		})
	}
}

// revision is the datastore's current revision, read through a quorum list.
func revision(ctx context.Context, t *testing.T, s *server) string {
	t.Helper()
	l, err := s.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	return l.ResourceVersion
}
