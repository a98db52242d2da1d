package datastore

import (
	"context"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/server"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/klog/v2"
)

// watchHub hands the datastore's events to the watches that want them.
//
// kine's own watch service (v0.17.5) gives every watch a subscription of its
// own to the backend's event stream: each event wakes every watch (about 60
// for the API server's watch caches, two goroutines each), and each filters
// it by key afterwards, then takes the stream's lock to record the revision
// it has seen, walking every other watch of the stream under it. The hub
// holds the one subscription instead and, per event, wakes only the streams
// that have a watch whose range holds the event's key, as etcd's watchable
// store does (docs/PERFORMANCE.md, "Requests on SQLite"). On SQLite each
// write is also offered as it commits, and handed over then in the writer's
// goroutine when every revision before it has been (commitFeed); the
// backend's batches bring what no writer offered, and each revision goes out
// once.
//
// Everything a stream sends goes through one queue, in the order the hub
// decides it under its lock. A watch has been handed every event up to the
// hub's revision it wants once it is caught up, so a progress notification
// queued at that revision follows all of them; no per-watch bookkeeping of
// what was sent is needed.
type watchHub struct {
	backend server.Backend
	lg      klog.Logger

	mu sync.Mutex
	// order merges the events writers offer at commit with the backend's
	// batches; every event up to order.delivered has been handed to the
	// watches that want it.
	order   merger
	watches map[*watch]struct{}
	// atCommit counts the events handed over from commits, not the backend's
	// batches.
	atCommit int64
}

// watch is one watch of a stream. Its fields are guarded by the hub's lock.
type watch struct {
	id     int64
	stream *watchStream

	key, end string // etcd's range: end "" is the key alone, "\x00" every key from key on
	next     int64  // the first revision it has not been handed
	prevKV   bool
	noPut    bool
	noDelete bool
	progress bool // periodic progress notifications

	// catchingUp: its history is being read (catchUp); live events wait in held.
	catchingUp bool
	held       []*server.Event
	lastSent   time.Time
}

// newWatchHub subscribes to backend's events; they are dispatched until ctx
// ends. wg counts the dispatching goroutine.
func newWatchHub(ctx context.Context, wg *sync.WaitGroup, backend server.Backend, lg klog.Logger) *watchHub {
	h := &watchHub{backend: backend, lg: lg, watches: map[*watch]struct{}{}}
	wr := backend.Watch(ctx, 0)
	h.order.delivered = wr.CurrentRevision
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.run(ctx, wr)
	}()
	return h
}

// run dispatches the backend's event batches. When the backend ends the
// subscription while ctx lasts (kine drops a subscriber that falls 100
// batches behind), the events until the next subscription are lost to every
// watch: once subscribed again, every watch (also one created meanwhile) is
// cancelled, as etcd cancels a watch it cannot serve, and the hub goes on
// from the new subscription's revision. The API server's watch caches then
// list and watch anew.
func (h *watchHub) run(ctx context.Context, wr server.WatchResult) {
	for {
		if wr.Eventc != nil {
			for b := range wr.Eventc {
				h.dispatch(b)
			}
		}
		if ctx.Err() != nil {
			return
		}
		h.lg.Info("The datastore's event stream ended; cancelling every watch")
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		wr = h.backend.Watch(ctx, 0)
		h.restart(wr.CurrentRevision, "datastore: the event stream was interrupted; watch again")
	}
}

// dispatch hands a batch of the backend's to the watches that want its
// events, less those handed over already.
func (h *watchHub) dispatch(b server.EventBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handLocked(h.order.polled(b))
}

// committed hands a write's event to the watches that want it as the write
// commits, in the writer's goroutine (commitFeed, on SQLite), once every
// revision before it has been handed over; until then it waits, and the
// backend's batches fill in what no writer offered.
func (h *watchHub) committed(e *server.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.order.committed(e)
	h.atCommit += int64(len(b.Events))
	h.handLocked(b)
}

// handLocked hands the events of b, in revision order and after every
// revision handed over before, to the watches that want them. Callers hold
// the lock.
func (h *watchHub) handLocked(b server.EventBatch) {
	if len(b.Events) == 0 {
		return
	}
	for w := range h.watches {
		if w.catchingUp {
			for _, e := range b.Events {
				if w.wants(e) {
					w.held = append(w.held, e)
				}
			}
			continue
		}
		h.send(w, b.CurrentRev, b.Events)
	}
}

// send queues the events of evs that w wants, with header revision rev.
func (h *watchHub) send(w *watch, rev int64, evs []*server.Event) {
	var out []*mvccpb.Event
	for _, e := range evs {
		if w.wants(e) {
			out = append(out, w.event(e))
			w.next = e.KV.ModRevision + 1
		}
	}
	if len(out) == 0 {
		return
	}
	w.lastSent = time.Now()
	w.stream.push(&etcdserverpb.WatchResponse{Header: header(rev), WatchId: w.id, Events: out})
}

// addLocked registers w and says whether it needs catching up. A watch that
// starts after the hub's revision (or at 0, the next one) needs nothing from
// the past; one that starts at or before it is caught up by catchUp first.
// Callers hold the lock.
func (h *watchHub) addLocked(w *watch) (catchUp bool) {
	if w.next == 0 {
		w.next = h.order.delivered + 1
	}
	w.catchingUp = w.next <= h.order.delivered
	h.watches[w] = struct{}{}
	return w.catchingUp
}

// catchUp hands w the events from start, its first revision, up to now:
// the backend's history read after w was registered, then the live events
// held meanwhile that the history does not cover. kine reads history as one
// batch of every key's events after a revision, with its current revision
// taken in the same query, so every event up to that revision is in it.
func (h *watchHub) catchUp(ctx context.Context, w *watch, start int64) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wr := h.backend.Watch(hctx, start)
	var (
		hist server.EventBatch
		err  error
	)
	if wr.CompactRevision == 0 {
		select {
		case hist = <-wr.Eventc:
		case <-ctx.Done():
			return
		}
		select {
		case err = <-wr.Errorc:
		default:
		}
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if _, registered := h.watches[w]; !registered {
		return // cancelled meanwhile
	}
	switch {
	case wr.CompactRevision != 0:
		w.stream.cancel(w, &etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: w.id, Canceled: true,
			CompactRevision: wr.CompactRevision, CancelReason: server.ErrCompacted.Error()})
		return
	case err != nil || wr.Eventc == nil:
		reason := "datastore: reading the watch's history failed"
		if err != nil {
			reason = err.Error()
		}
		w.stream.cancel(w, &etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: w.id, Canceled: true, CancelReason: reason})
		return
	}
	evs := hist.Events
	for _, e := range w.held {
		if e.KV.ModRevision > hist.CurrentRev {
			evs = append(evs, e)
		}
	}
	w.held, w.catchingUp = nil, false
	h.send(w, max(h.order.delivered, hist.CurrentRev), evs)
	w.stream.progressIfWanted(h.order.delivered)
}

// removeLocked unregisters w; nothing more is queued for it. Callers hold
// the lock.
func (h *watchHub) removeLocked(w *watch) {
	w.held = nil
	delete(h.watches, w)
	delete(w.stream.watches, w.id)
}

// restart cancels every watch, telling each client why, and goes on from
// revision rev.
func (h *watchHub) restart(rev int64, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watches {
		w.stream.cancel(w, &etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: w.id, Canceled: true, CancelReason: reason})
	}
	h.order.skipTo(rev)
}

// wants says whether w is to be handed e.
func (w *watch) wants(e *server.Event) bool {
	if e == nil || e.KV == nil || e.KV.ModRevision < w.next {
		return false
	}
	if (e.Delete && w.noDelete) || (!e.Delete && w.noPut) {
		return false
	}
	return inRange(e.KV.Key, w.key, w.end)
}

// inRange is etcd's range test: end "" is key alone, "\x00" every key from
// key on, anything else [key, end).
func inRange(k, key, end string) bool {
	switch end {
	case "":
		return k == key
	case "\x00":
		return k >= key
	}
	return k >= key && k < end
}

// event converts e for w, a fresh message for each watch as kine does.
func (w *watch) event(e *server.Event) *mvccpb.Event {
	ev := &mvccpb.Event{Kv: toKV(e.KV)}
	if e.Delete {
		ev.Type = mvccpb.DELETE
	}
	if w.prevKV && !e.Create {
		ev.PrevKv = toKV(e.PrevKV)
	}
	return ev
}

// The API server watches and writes "compact_rev_key"; kine keeps that
// value under "compact_rev_key_apiserver" (its pkg/server, unexported) and
// maps the key back in what it sends.
const (
	compactRevKey = "compact_rev_key"
	compactRevAPI = "compact_rev_key_apiserver"
)

func toKV(kv *server.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	out := &mvccpb.KeyValue{
		Key:            []byte(kv.Key),
		Value:          kv.Value,
		Version:        kv.Version,
		Lease:          kv.Lease,
		CreateRevision: kv.CreateRevision,
		ModRevision:    kv.ModRevision,
	}
	if kv.Key == compactRevAPI {
		out.Key = []byte(compactRevKey)
		out.Version, out.Value = server.DecodeVersion(kv.Value)
	}
	return out
}

func header(rev int64) *etcdserverpb.ResponseHeader {
	return &etcdserverpb.ResponseHeader{Revision: rev}
}
