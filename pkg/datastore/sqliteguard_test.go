package datastore

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// TestGuardConflictsInSharedCommit: writers racing to update the same keys
// get conflicts, not "did not store the write", also when the winner's
// update is in a shared commit that has not reached the disk yet.
func TestGuardConflictsInSharedCommit(t *testing.T) {
	ctx, b := startSQLiteBackendWindow(t, 30*time.Millisecond)
	g := newWriteGuard(b, logr.Discard())
	const keys, writersPerKey, rounds = 4, 4, 6
	key := func(k int) string { return fmt.Sprintf("%skube-node-lease/node-%d", leasePrefix, k) }
	for k := range keys {
		if _, err := g.Create(ctx, key(k), []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
	var conflicts atomic.Int64
	inParallel(t, keys*writersPerKey, func(w int) error {
		k := key(w % keys)
		for round := 0; round < rounds; {
			_, kv, err := g.Get(ctx, k, 0, false)
			if err != nil || kv == nil {
				return fmt.Errorf("get %s: %v, %v", k, kv, err)
			}
			n, _ := strconv.Atoi(string(kv.Value))
			_, cur, updated, err := g.Update(ctx, k, []byte(strconv.Itoa(n+1)), kv.ModRevision, 0)
			if err != nil {
				return fmt.Errorf("update %s at %d: %v", k, kv.ModRevision, err)
			}
			if !updated {
				if cur == nil || cur.ModRevision <= kv.ModRevision {
					return fmt.Errorf("conflict on %s at %d answered %v: not a newer revision", k, kv.ModRevision, cur)
				}
				conflicts.Add(1)
				continue
			}
			round++
		}
		return nil
	})
	t.Logf("%d conflicts", conflicts.Load())
	if err := g.healthy(ctx); err != nil {
		t.Errorf("the guard reports writes failing after conflicts: %v", err)
	}
}
