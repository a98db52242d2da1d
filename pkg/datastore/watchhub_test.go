package datastore

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// written is one write a test made, as the datastore answered it.
type written struct {
	key   string
	rev   int64
	del   bool
	value string
	prev  string // the value it replaced; "" for a create
}

// watchClients runs test with each client of the hub's watches: etcd's
// client through the socket (the Watch service, watchServer), and the API
// server's in-process client (hubWatcher).
func watchClients(t *testing.T, test func(ctx context.Context, t *testing.T, cli *clientv3.Client)) {
	for _, via := range []string{"socket", "in process"} {
		t.Run(via, func(t *testing.T) {
			ctx := testContext(t)
			ds := startReady(ctx, t, testOptions(t, TypeSQLite, t.TempDir()))
			cc := ds.Client()
			if via == "socket" {
				test(ctx, t, testClient(ctx, t, cc))
				return
			}
			cli, err := cc.InProcess(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cli.Close() })
			test(ctx, t, cli)
		})
	}
}

// TestWatchHub runs writers on kine and SQLite while watches on one stream,
// with different ranges and start revisions, take their events; each must
// receive exactly the writes in its range from its start, in order, with
// previous values when asked for, and only those.
func TestWatchHub(t *testing.T) { watchClients(t, testWatchHub) }

func testWatchHub(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	base, err := cli.Put(ctx, "/hub/base", "x")
	if err != nil {
		t.Fatal(err)
	}
	start := base.Header.Revision + 1

	type spec struct {
		name     string
		key      string
		opts     []clientv3.OpOption
		inRange  func(string) bool
		wantPrev bool
		noDelete bool
	}
	specs := []spec{
		{name: "prefix a", key: "/hub/a/", opts: []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()},
			inRange: func(k string) bool { return len(k) > 7 && k[:7] == "/hub/a/" }, wantPrev: true},
		{name: "prefix b, no prev", key: "/hub/b/", opts: []clientv3.OpOption{clientv3.WithPrefix()},
			inRange: func(k string) bool { return len(k) > 7 && k[:7] == "/hub/b/" }},
		{name: "one key", key: "/hub/a/3", opts: []clientv3.OpOption{clientv3.WithPrevKV()},
			inRange: func(k string) bool { return k == "/hub/a/3" }, wantPrev: true},
		{name: "from key", key: "/hub/b/", opts: []clientv3.OpOption{clientv3.WithFromKey()},
			inRange: func(k string) bool { return k >= "/hub/b/" }},
		{name: "range, no deletes", key: "/hub/a/", opts: []clientv3.OpOption{clientv3.WithRange("/hub/b/"), clientv3.WithFilterDelete()},
			inRange: func(k string) bool { return k >= "/hub/a/" && k < "/hub/b/" }, noDelete: true},
	}

	// Half the watches start before the writes, at the next revision; the
	// other half start at the same revision while the writers run, so they
	// are caught up from history while live events arrive.
	type running struct {
		spec
		ch clientv3.WatchChan
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	var watches []running
	for _, s := range specs {
		watches = append(watches, running{s, cli.Watch(wctx, s.key, append(s.opts, clientv3.WithRev(start))...)})
	}

	var (
		mu    sync.Mutex
		wrote []written
	)
	writers := make(chan error, 4)
	begun := make(chan struct{})
	for w := range 4 {
		go func() {
			writers <- churnClient(ctx, cli, w, 40, func(x written) {
				mu.Lock()
				wrote = append(wrote, x)
				if len(wrote) == 100 {
					close(begun)
				}
				mu.Unlock()
			})
		}()
	}
	<-begun
	for _, s := range specs {
		s.name += ", caught up"
		watches = append(watches, running{s, cli.Watch(wctx, s.key, append(s.opts, clientv3.WithRev(start))...)})
	}
	for range 4 {
		if err := <-writers; err != nil {
			t.Fatal(err)
		}
	}
	sort.Slice(wrote, func(i, j int) bool { return wrote[i].rev < wrote[j].rev })
	last := wrote[len(wrote)-1].rev

	for _, w := range watches {
		var want []written
		for _, x := range wrote {
			if w.inRange(x.key) && !(w.noDelete && x.del) {
				want = append(want, x)
			}
		}
		got := receiveUntil(t, w.ch, want)
		if len(got) != len(want) {
			t.Errorf("%s: got %d events, want %d", w.name, len(got), len(want))
			continue
		}
		for i, e := range got {
			x := want[i]
			if string(e.Kv.Key) != x.key || e.Kv.ModRevision != x.rev || (e.Type == mvccpb.DELETE) != x.del {
				t.Errorf("%s: event %d is %s %s@%d, want %+v", w.name, i, e.Type, e.Kv.Key, e.Kv.ModRevision, x)
				break
			}
			if !x.del && string(e.Kv.Value) != x.value {
				t.Errorf("%s: event %d (%s@%d) has value %q, want %q", w.name, i, x.key, x.rev, e.Kv.Value, x.value)
			}
			switch {
			case !w.wantPrev && e.PrevKv != nil:
				t.Errorf("%s: event %d carries a previous value it did not ask for", w.name, i)
			case w.wantPrev && x.prev != "" && (e.PrevKv == nil || string(e.PrevKv.Value) != x.prev):
				t.Errorf("%s: event %d (%s@%d) has previous value %v, want %q", w.name, i, x.key, x.rev, e.PrevKv, x.prev)
			}
		}
	}

	// A progress request is answered on the stream once every event up to
	// the last write has been sent.
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range watches {
		select {
		case r := <-w.ch:
			if !r.IsProgressNotify() || r.Header.Revision < last {
				t.Errorf("%s: after a progress request got %+v (%d events), want a progress notification at >= %d", w.name, r.Header, len(r.Events), last)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: no progress notification", w.name)
		}
	}
}

// receiveUntil takes events from ch until it has as many as want (or an
// event past want's last), failing on an error or after 20 s.
func receiveUntil(t *testing.T, ch clientv3.WatchChan, want []written) []*clientv3.Event {
	t.Helper()
	var got []*clientv3.Event
	timeout := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Errorf("watch closed after %d events", len(got))
				return got
			}
			if err := r.Err(); err != nil {
				t.Errorf("watch failed after %d events: %v", len(got), err)
				return got
			}
			got = append(got, r.Events...)
		case <-timeout:
			return got
		}
	}
	return got
}

// churnClient creates, updates and deletes keys /hub/a/<n> and /hub/b/<n>
// through cli, reporting each write.
func churnClient(ctx context.Context, cli *clientv3.Client, w, n int, report func(written)) error {
	for i := range n {
		key := fmt.Sprintf("/hub/%c/%d", "ab"[i%2], w)
		v := fmt.Sprintf("w%d-%d", w, i)
		put, err := cli.Put(ctx, key, v)
		if err != nil {
			return err
		}
		report(written{key: key, rev: put.Header.Revision, value: v})
		put2, err := cli.Put(ctx, key, v+"u")
		if err != nil {
			return err
		}
		report(written{key: key, rev: put2.Header.Revision, value: v + "u", prev: v})
		del, err := deleteKey(ctx, cli, key, put2.Header.Revision)
		if err != nil {
			return err
		}
		report(written{key: key, rev: del, del: true, prev: v + "u"})
	}
	return nil
}

// deleteKey deletes key at revision rev as the API server does (kine serves
// only the API server's forms of delete) and returns the delete's revision.
func deleteKey(ctx context.Context, cli *clientv3.Client, key string, rev int64) (int64, error) {
	r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil || !r.Succeeded {
		return 0, fmt.Errorf("delete %s at %d: %v, %v", key, rev, r, err)
	}
	return r.Header.Revision, nil
}

// TestWatchHubCancelAndCompact cancels a watch (nothing more arrives on it
// while another watch of the stream goes on), and watches from a compacted
// revision (the watch is refused with the compaction's revision).
func TestWatchHubCancelAndCompact(t *testing.T) { watchClients(t, testWatchHubCancelAndCompact) }

func testWatchHubCancelAndCompact(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	c1, cancel1 := context.WithCancel(ctx)
	w1 := cli.Watch(c1, "/k/", clientv3.WithPrefix())
	c2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	w2 := cli.Watch(c2, "/k/", clientv3.WithPrefix())
	if _, err := cli.Put(ctx, "/k/1", "a"); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []clientv3.WatchChan{w1, w2} {
		if got := receiveUntil(t, ch, make([]written, 1)); len(got) != 1 {
			t.Fatalf("got %d events before the cancel, want 1", len(got))
		}
	}
	cancel1()
	var revs []int64
	for i := range 3 {
		put, err := cli.Put(ctx, fmt.Sprintf("/k/%d", i+2), "b")
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, put.Header.Revision)
	}
	if got := receiveUntil(t, w2, make([]written, 3)); len(got) != 3 || got[2].Kv.ModRevision != revs[2] {
		t.Fatalf("the other watch got %d events after the cancel, want 3 up to %d", len(got), revs[2])
	}
	for r := range w1 {
		if len(r.Events) > 0 {
			t.Errorf("the cancelled watch got %d events", len(r.Events))
		}
	}

	// kine compacts only revisions more than 1000 behind the current one.
	inParallel(t, 8, func(w int) error {
		for i := range 140 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/fill/%d", w), fmt.Sprint(i)); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := cli.Compact(ctx, revs[2]); err != nil {
		t.Fatalf("compact: %v", err)
	}
	wc := cli.Watch(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithRev(revs[0]))
	select {
	case r := <-wc:
		if r.CompactRevision == 0 || r.Err() != rpctypes.ErrCompacted {
			t.Errorf("watch from compacted revision %d: %+v, err %v; want refused as compacted", revs[0], r, r.Err())
		}
	case <-time.After(10 * time.Second):
		t.Error("watch from a compacted revision: no answer")
	}
}

// startHub starts a watch hub on b until the test ends; writes are not
// offered to it at commit unless the test hands them over (b.feed.offerTo).
func startHub(ctx context.Context, t *testing.T, b createRevisionFix) *watchHub {
	t.Helper()
	var wg sync.WaitGroup
	hctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() { cancel(); wg.Wait() })
	return newWatchHub(hctx, &wg, b, klog.FromContext(ctx))
}

// TestWatchHubRestart holds the hub up while a few hundred creates commit,
// so that kine drops its subscription as it drops any subscriber 100
// batches behind. The hub must cancel its watches (their events are lost),
// subscribe again, and serve a new watch from there.
func TestWatchHubRestart(t *testing.T) {
	ctx, b := startSQLiteBackend(t)
	h := startHub(ctx, t, b)

	// Watches are created as the Watch service creates them.
	ws := &watchServer{hub: h, notifyInterval: time.Minute}
	stream := ws.newStream()
	add := func(key string) *watch {
		id := stream.nextID
		ws.create(ctx, stream, &etcdserverpb.WatchCreateRequest{Key: []byte(key), RangeEnd: []byte(key + "\xff")})
		h.mu.Lock()
		defer h.mu.Unlock()
		w := stream.watches[id]
		if w == nil || w.catchingUp {
			t.Fatal("a watch from the next revision was not created, or needs catching up")
		}
		return w
	}
	old := add("/restart/")

	h.mu.Lock()
	start := time.Now()
	// Spaced out, so that each create's event is a batch of its own.
	for i := range 400 {
		if _, err := b.Create(ctx, fmt.Sprintf("/restart/%d", i), []byte("v"), 0); err != nil {
			h.mu.Unlock()
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("400 creates in %v", time.Since(start))
	// Their events reach kine's broadcaster while the hub is held up.
	time.Sleep(2 * time.Second)
	h.mu.Unlock()

	deadline := time.Now().Add(20 * time.Second)
	for {
		h.mu.Lock()
		_, live := h.watches[old]
		h.mu.Unlock()
		if !live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hub was not dropped, or did not cancel its watch")
		}
		time.Sleep(20 * time.Millisecond)
	}
	q, _ := stream.take()
	if len(q) == 0 || !q[len(q)-1].Canceled || q[len(q)-1].WatchId != old.id {
		t.Fatalf("the old watch's last response is not its cancellation: %d responses", len(q))
	}

	w := add("/after/")
	rev, err := b.Create(ctx, "/after/1", []byte("v"), 0)
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		q, _ = stream.take()
		for _, r := range q {
			if r.WatchId == w.id && len(r.Events) == 1 && r.Events[0].Kv.ModRevision == rev {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("a watch created after the hub subscribed again did not get the create at %d", rev)
}
