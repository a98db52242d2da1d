package datastore

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// hubWatcher is etcd's client Watcher for the API server in this process,
// served by the watch hub directly.
//
// Through etcd's adapters (inprocess.go) every event would take the path of
// a remote watch: the hub's stream sender hands it to the adapter's pipe,
// where the etcd client's receiving goroutine takes it, passes it to the
// stream's dispatching goroutine, which passes it to the watch's own
// goroutine, which puts it on the watch's channel: four goroutines in turn
// between the hub and the API server's watcher, each waiting for a core
// under load (docs/PERFORMANCE.md, "Requests on SQLite").
// Here each watch is a stream of the hub's with one watch, and one goroutine
// takes its queue and puts it on the watch's channel, as the etcd client
// does for a watch: events and progress notifications in order, a Created
// response only when asked for, a cancellation (compaction, a history that
// could not be read, an interrupted event stream) last, then the channel is
// closed; it is also closed when the watch's context ends or the watcher is
// closed. A watch whose queue overflows (maxQueuedEvents) is resumed from
// the revision it has reached, as the etcd client resumes a watch whose
// stream failed.
type hubWatcher struct {
	ws   *watchServer
	done chan struct{} // closed by Close

	mu      sync.Mutex
	closed  bool
	streams map[*watchStream]struct{}
}

var _ clientv3.Watcher = (*hubWatcher)(nil)

// newHubWatcher returns a watcher on ws's hub; one goroutine sends the
// periodic progress notifications of all its watches until Close.
func newHubWatcher(ws *watchServer) *hubWatcher {
	w := &hubWatcher{ws: ws, done: make(chan struct{}), streams: map[*watchStream]struct{}{}}
	if ws.notifyInterval > 0 {
		go w.tick()
	}
	return w
}

func (w *hubWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	op := clientv3.OpWatch(key, opts...)
	out := make(chan clientv3.WatchResponse, 1)
	st := w.create(ctx, createRequest(op, op.Rev()))
	if st == nil {
		close(out)
		return out
	}
	go w.serve(ctx, st, op, out)
	return out
}

// createRequest is op's watch from revision rev, as the etcd client asks
// for it.
func createRequest(op clientv3.Op, rev int64) *etcdserverpb.WatchCreateRequest {
	req := &etcdserverpb.WatchCreateRequest{
		Key:            op.KeyBytes(),
		RangeEnd:       op.RangeBytes(),
		StartRevision:  rev,
		ProgressNotify: op.IsProgressNotify(),
		PrevKv:         op.IsPrevKV(),
		WatchId:        clientv3.AutoWatchID,
	}
	if op.IsFilterPut() {
		req.Filters = append(req.Filters, etcdserverpb.WatchCreateRequest_NOPUT)
	}
	if op.IsFilterDelete() {
		req.Filters = append(req.Filters, etcdserverpb.WatchCreateRequest_NODELETE)
	}
	return req
}

// create starts req's watch on a stream of its own; nil when the watcher is
// closed or ctx has ended.
func (w *hubWatcher) create(ctx context.Context, req *etcdserverpb.WatchCreateRequest) *watchStream {
	if ctx.Err() != nil {
		return nil
	}
	st := w.ws.newStream()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.streams[st] = struct{}{}
	w.ws.create(ctx, st, req)
	return st
}

// remove ends st's watch.
func (w *hubWatcher) remove(st *watchStream) {
	w.mu.Lock()
	delete(w.streams, st)
	w.mu.Unlock()
	st.close()
}

// serve puts what st's watch (op's) is sent on out until it is cancelled,
// ctx ends or the watcher is closed, and then closes out.
func (w *hubWatcher) serve(ctx context.Context, st *watchStream, op clientv3.Op, out chan<- clientv3.WatchResponse) {
	defer close(out)
	defer func() {
		if st != nil {
			w.remove(st)
		}
	}()
	// next: the revision to resume from.
	next := op.Rev()
	for {
		select {
		case <-st.wake:
		case <-ctx.Done():
			return
		case <-w.done:
			return
		}
		q, err := st.take()
		for _, r := range q {
			switch {
			case r.Created && !r.Canceled:
				if next == 0 {
					next = r.Header.Revision + 1
				}
				if !op.IsCreatedNotify() {
					continue
				}
			case len(r.Events) > 0:
				next = r.Events[len(r.Events)-1].Kv.ModRevision + 1
			case !r.Canceled:
				next = max(next, r.Header.Revision+1)
			}
			select {
			case out <- clientv3.WatchResponse{Header: r.Header, Events: r.Events, CompactRevision: r.CompactRevision,
				Canceled: r.Canceled, Created: r.Created, CancelReason: r.CancelReason}:
			case <-ctx.Done():
				return
			case <-w.done:
				return
			}
			if r.Canceled {
				return
			}
		}
		if err != nil {
			// The queue overflowed: watch again from where it got to.
			w.remove(st)
			if st = w.create(ctx, createRequest(op, next)); st == nil {
				return
			}
		}
	}
}

// RequestProgress asks every watch for a progress notification, sent once
// it is caught up.
func (w *hubWatcher) RequestProgress(ctx context.Context) error {
	for _, st := range w.all() {
		st.requestProgress()
	}
	return ctx.Err()
}

// tick sends the periodic progress notifications.
func (w *hubWatcher) tick() {
	t := time.NewTicker(w.ws.notifyInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			for _, st := range w.all() {
				st.progressTick(w.ws.notifyInterval)
			}
		case <-w.done:
			return
		}
	}
}

func (w *hubWatcher) all() []*watchStream {
	w.mu.Lock()
	defer w.mu.Unlock()
	sts := make([]*watchStream, 0, len(w.streams))
	for st := range w.streams {
		sts = append(sts, st)
	}
	return sts
}

// Close ends every watch and closes their channels.
func (w *hubWatcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.done)
	}
	return nil
}
