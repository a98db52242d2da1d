package datastore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestHubWatcherResume lets an in-process watch's queue overflow while
// nobody reads its channel: the watch must go on from the revision it had
// reached, on a new stream, with every event once and in order. Close then
// ends the watch's channel.
func TestHubWatcherResume(t *testing.T) {
	ctx, b := startSQLiteBackend(t)
	h := startHub(ctx, t, b)
	b.feed.offerTo(h.committed)
	w := newHubWatcher(&watchServer{hub: h, notifyInterval: time.Minute, maxQueued: 10})

	ch := w.Watch(ctx, "/resume/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r := <-ch; !r.Created || r.Err() != nil {
		t.Fatalf("first response %+v (err %v), want the watch's creation", r, r.Err())
	}
	first := w.all()
	var want []int64
	for i := range 100 {
		rev, err := b.Create(ctx, fmt.Sprintf("/resume/%d", i), []byte("v"), 0)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, rev)
	}

	var got []int64
	timeout := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case r, ok := <-ch:
			if !ok || r.Err() != nil {
				t.Fatalf("watch ended after %d events (err %v)", len(got), r.Err())
			}
			for _, e := range r.Events {
				got = append(got, e.Kv.ModRevision)
			}
		case <-timeout:
			t.Fatalf("got %d of %d events", len(got), len(want))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("events at %v, want %v", got, want)
	}
	if now := w.all(); len(first) != 1 || len(now) != 1 || now[0] == first[0] {
		t.Errorf("the watch was not resumed on a new stream (%d streams before, %d now)", len(first), len(now))
	}

	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r, ok := <-ch:
		if ok {
			t.Errorf("after Close the watch got %+v, want its channel closed", r)
		}
	case <-time.After(10 * time.Second):
		t.Error("Close left the watch's channel open")
	}
	if w.Watch(context.Background(), "/resume/") == nil {
		t.Fatal("Watch after Close returned no channel")
	}
	if _, ok := <-w.Watch(context.Background(), "/resume/"); ok {
		t.Error("a watch after Close got a response, want its channel closed")
	}
}
