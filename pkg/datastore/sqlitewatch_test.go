package datastore

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/server"
)

// TestMerger feeds committed creates and polled batches to the merge in the
// orders they can arrive and checks what goes out: every revision once, in
// order, whichever source has it first.
func TestMerger(t *testing.T) {
	type step struct {
		commit int64   // a committed create at this revision, or
		polled []int64 // a polled batch with these events,
		upTo   int64   // covering revisions up to this one
		want   []int64 // revisions sent
	}
	for _, tc := range []struct {
		name  string
		start int64
		steps []step
	}{
		{"commits in order", 10, []step{
			{commit: 11, want: []int64{11}},
			{commit: 12, want: []int64{12}},
			{polled: []int64{11, 12}, upTo: 12},
		}},
		{"commit ahead waits for the update before it", 10, []step{
			{commit: 12},
			{commit: 13},
			{polled: []int64{11}, upTo: 11, want: []int64{11, 12, 13}},
			{polled: []int64{12, 13}, upTo: 13},
		}},
		{"poll first, late commit dropped", 10, []step{
			{polled: []int64{11, 12}, upTo: 12, want: []int64{11, 12}},
			{commit: 12},
			{commit: 13, want: []int64{13}},
		}},
		{"poll covers some waiting commits and releases the rest", 10, []step{
			{commit: 13},
			{commit: 15},
			{commit: 16},
			{polled: []int64{11, 12, 13, 14}, upTo: 14, want: []int64{11, 12, 13, 14, 15, 16}},
		}},
		{"a fill is covered without an event", 10, []step{
			{commit: 12},
			{polled: nil, upTo: 11, want: []int64{12}},
		}},
		{"fills inside a batch", 10, []step{
			{commit: 14},
			{polled: []int64{11, 13}, upTo: 13, want: []int64{11, 13, 14}},
		}},
		{"revisions before the start", 10, []step{
			{commit: 9},
			{polled: []int64{10}, upTo: 10},
			{commit: 11, want: []int64{11}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := merger{delivered: tc.start}
			for i, s := range tc.steps {
				var b server.EventBatch
				if s.commit != 0 {
					b = m.committed(createEvent(s.commit))
				} else {
					pb := server.EventBatch{CurrentRev: s.upTo}
					for _, rev := range s.polled {
						pb.Events = append(pb.Events, createEvent(rev))
					}
					b = m.polled(pb)
				}
				var got []int64
				for _, e := range b.Events {
					got = append(got, e.KV.ModRevision)
				}
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d: sent %v, want %v", i, got, s.want)
				}
				if len(got) > 0 && b.CurrentRev != got[len(got)-1] {
					t.Errorf("step %d: batch current revision %d, want %d", i, b.CurrentRev, got[len(got)-1])
				}
			}
			if len(m.waiting) != 0 {
				t.Errorf("still waiting: %v", m.waiting)
			}
		})
	}
}

func createEvent(rev int64) *server.Event {
	return &server.Event{Create: true, KV: &server.KeyValue{Key: fmt.Sprint(rev), CreateRevision: rev, ModRevision: rev}}
}

// TestCommitFeedStream writes creates, updates, deletes and re-creates from
// several writers to kine on a real SQLite file and checks that a watch
// receives exactly the history the database holds, event for event, with
// previous values, that events were sent as they committed, and that the
// event a writer reads back at commit is the one the polling loop reads.
func TestCommitFeedStream(t *testing.T) {
	ctx, b := startSQLiteBackend(t)
	live := b.Watch(ctx, 0)
	start := live.CurrentRevision
	// Read as the API server does, while the writers run: a watcher that
	// falls 100 batches behind is dropped.
	received := make(chan []*server.Event, 1)
	wrote := make(chan int64, 1)
	go func() {
		var got []*server.Event
		end := int64(-1)
		timeout := time.After(30 * time.Second)
		for end < 0 || len(got) == 0 || got[len(got)-1].KV.ModRevision < end {
			select {
			case end = <-wrote:
			case batch, ok := <-live.Eventc:
				if !ok {
					t.Errorf("watch closed after %d events", len(got))
					received <- got
					return
				}
				got = append(got, batch.Events...)
			case <-timeout:
				t.Errorf("watch delivered %d events, not up to revision %d", len(got), end)
				received <- got
				return
			}
		}
		received <- got
	}()

	inParallel(t, 4, func(w int) error {
		return churn(ctx, b, fmt.Sprintf("/registry/configmaps/default/feed-%d", w), 25)
	})
	// The history from the database itself (kine's cached current revision
	// may lag behind its last write).
	history := b.Watch(ctx, start+1)
	want := (<-history.Eventc).Events
	if len(want) == 0 {
		t.Fatal("the database holds no history")
	}
	wrote <- want[len(want)-1].KV.ModRevision
	got := <-received
	if len(got) != len(want) {
		seen := map[int64]bool{}
		for _, e := range got {
			seen[e.KV.ModRevision] = true
		}
		for _, e := range want {
			if !seen[e.KV.ModRevision] {
				t.Errorf("the watch missed %s", eventString(e))
			}
		}
		t.Fatalf("watch got %d events, the database holds %d after revision %d", len(got), len(want), start)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("event %d: watch got %s, the database holds %s", i, eventString(got[i]), eventString(want[i]))
		}
	}
	// What a writer reads back at commit is what the polling loop delivers.
	for _, e := range want {
		stored, err := b.feed.row(ctx, e.KV.ModRevision)
		if err != nil {
			t.Fatalf("reading revision %d: %v", e.KV.ModRevision, err)
		}
		if !reflect.DeepEqual(stored, e) {
			t.Errorf("revision %d: read at commit %s, polled %s", e.KV.ModRevision, eventString(stored), eventString(e))
		}
	}
	n := b.feed.atCommit.Load()
	if n == 0 {
		t.Errorf("no event was sent at commit; all %d came from the polling loop", len(got))
	}
	t.Logf("%d of %d events sent at commit", n, len(got))
}

// churn creates key, updates it twice, deletes it and creates it again, n
// times (the last create is deleted by the next round's delete path).
func churn(ctx context.Context, b createRevisionFix, key string, n int) error {
	for i := range n {
		rev, err := b.Create(ctx, key, []byte(fmt.Sprintf("c%d", i)), 0)
		if err != nil {
			return fmt.Errorf("create %s: %w", key, err)
		}
		for u := range 2 {
			var ok bool
			if rev, _, ok, err = b.Update(ctx, key, []byte(fmt.Sprintf("u%d-%d", i, u)), rev, 0); err != nil || !ok {
				return fmt.Errorf("update %s at %d: %v, %v", key, rev, ok, err)
			}
		}
		if _, _, ok, err := b.Delete(ctx, key, rev); err != nil || !ok {
			return fmt.Errorf("delete %s at %d: %v, %v", key, rev, ok, err)
		}
	}
	return nil
}

func eventString(e *server.Event) string {
	s := fmt.Sprintf("{create %v delete %v kv %+v", e.Create, e.Delete, *e.KV)
	if e.PrevKV != nil {
		s += fmt.Sprintf(" prev %+v", *e.PrevKV)
	}
	return s + "}"
}
