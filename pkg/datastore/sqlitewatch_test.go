package datastore

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/server"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
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
// several writers to kine on a real SQLite file while a watch hub takes both
// the writes offered at commit and kine's polling loop, and checks that a
// watch receives exactly the history the database holds, event for event,
// with previous values, that events were handed over as they committed, and
// that the event a writer reads back at commit is the one the polling loop
// reads.
func TestCommitFeedStream(t *testing.T) {
	ctx, b := startSQLiteBackend(t)
	h := startHub(ctx, t, b)
	b.feed.offerTo(h.committed)
	const prefix = "/registry/configmaps/default/feed-"
	ws := &watchServer{hub: h, notifyInterval: time.Minute}
	stream := ws.newStream()
	ws.create(ctx, stream, &etcdserverpb.WatchCreateRequest{Key: []byte(prefix), RangeEnd: []byte(prefix + "\xff"), PrevKv: true})
	h.mu.Lock()
	w, start := stream.watches[0], h.order.delivered
	h.mu.Unlock()

	// Taken as the Watch service takes them, while the writers run.
	received := make(chan []*mvccpb.Event, 1)
	wrote := make(chan int64, 1)
	go func() {
		var got []*mvccpb.Event
		end := int64(-1)
		timeout := time.After(30 * time.Second)
		for end < 0 || len(got) == 0 || got[len(got)-1].Kv.ModRevision < end {
			select {
			case end = <-wrote:
			case <-stream.wake:
				q, _ := stream.take()
				for _, r := range q {
					got = append(got, r.Events...)
				}
			case <-timeout:
				t.Errorf("watch delivered %d events, not up to revision %d", len(got), end)
				received <- got
				return
			}
		}
		received <- got
	}()

	inParallel(t, 4, func(w int) error {
		return churn(ctx, b, fmt.Sprintf("%s%d", prefix, w), 25)
	})
	// The history from the database itself (kine's cached current revision
	// may lag behind its last write).
	history := b.Watch(ctx, start+1)
	stored := (<-history.Eventc).Events
	if len(stored) == 0 {
		t.Fatal("the database holds no history")
	}
	wrote <- stored[len(stored)-1].KV.ModRevision
	got := <-received
	if len(got) != len(stored) {
		seen := map[int64]bool{}
		for _, e := range got {
			seen[e.Kv.ModRevision] = true
		}
		for _, e := range stored {
			if !seen[e.KV.ModRevision] {
				t.Errorf("the watch missed %s", eventString(e))
			}
		}
		t.Fatalf("watch got %d events, the database holds %d after revision %d", len(got), len(stored), start)
	}
	for i, e := range stored {
		if want := w.event(e); !proto.Equal(got[i], want) {
			t.Errorf("event %d: watch got %v, the database holds %v", i, got[i], want)
		}
	}
	// What a writer reads back at commit is what the polling loop delivers.
	for _, e := range stored {
		read, err := b.feed.row(ctx, e.KV.ModRevision)
		if err != nil {
			t.Fatalf("reading revision %d: %v", e.KV.ModRevision, err)
		}
		if !reflect.DeepEqual(read, e) {
			t.Errorf("revision %d: read at commit %s, polled %s", e.KV.ModRevision, eventString(read), eventString(e))
		}
	}
	h.mu.Lock()
	n := h.atCommit
	h.mu.Unlock()
	if n == 0 {
		t.Errorf("no event was handed over at commit; all %d came from the polling loop", len(got))
	}
	t.Logf("%d of %d events handed over at commit", n, len(got))
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
