package datastore

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/k3s-io/kine/pkg/server"
)

// TestGuardConflictsInSharedCommit: writers racing to update the same keys
// get conflicts, not "did not store the write", also when the winner's
// update is in a shared commit that has not reached the disk yet.
func TestGuardConflictsInSharedCommit(t *testing.T) {
	ctx, b := startSQLiteBackendWindow(t, 30*time.Millisecond)
	g := newWriteGuard(b, logr.Discard())
	const keys, writersPerKey, rounds = 4, 4, 6
	createCounters(ctx, t, g, keys)
	var conflicts atomic.Int64
	racingIncrements(ctx, t, g, keys, writersPerKey, rounds, func(_ int, read *server.KeyValue, _ int64, cur *server.KeyValue, updated bool) error {
		if updated {
			return nil
		}
		if cur == nil || cur.ModRevision <= read.ModRevision {
			return fmt.Errorf("conflict on %s at %d answered %v: not a newer revision", read.Key, read.ModRevision, cur)
		}
		conflicts.Add(1)
		return nil
	})
	t.Logf("%d conflicts", conflicts.Load())
	if err := g.healthy(ctx); err != nil {
		t.Errorf("the guard reports writes failing after conflicts: %v", err)
	}
}
