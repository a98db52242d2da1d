package datastore

import (
	"context"
	"time"

	"github.com/k3s-io/kine/pkg/server"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// registerKine registers kine's etcd API bridge on gs as kine's Register
// does, except for the Watch service, which watchServer (over hub) serves.
func registerKine(gs *grpc.Server, bridge *server.KVServerBridge, ws *watchServer) {
	etcdserverpb.RegisterKVServer(gs, bridge)
	etcdserverpb.RegisterLeaseServer(gs, bridge)
	etcdserverpb.RegisterClusterServer(gs, bridge)
	etcdserverpb.RegisterMaintenanceServer(gs, bridge)
	etcdserverpb.RegisterWatchServer(gs, ws)

	hsrv := health.NewServer()
	hsrv.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hsrv)
	reflection.Register(gs)
}

// watchServer is etcd's Watch service on the watch hub (watchhub.go).
type watchServer struct {
	etcdserverpb.UnimplementedWatchServer
	hub *watchHub
	// notifyInterval: how often a watch that asked for progress
	// notifications and has been sent nothing gets one.
	notifyInterval time.Duration
	// maxQueued bounds the events a stream's client has not taken yet
	// (0: maxQueuedEvents).
	maxQueued int
}

// maxQueuedEvents bounds the events a stream's client has not taken yet. A
// stream over it ends with Unavailable, and etcd's client resumes each of
// its watches on a new stream from the revision it had reached.
const maxQueuedEvents = 100_000

// watchStream is one Watch stream: its watches and its send queue, guarded
// by the hub's lock.
type watchStream struct {
	hub       *watchHub
	nextID    int64
	watches   map[int64]*watch
	queue     []*etcdserverpb.WatchResponse
	queued    int // events in queue
	maxQueued int
	wake      chan struct{}
	closed    bool
	failed    error
	// progressWanted: a progress request waits for a watch to catch up.
	progressWanted bool
}

// newStream returns an empty stream on the hub.
func (s *watchServer) newStream() *watchStream {
	st := &watchStream{hub: s.hub, watches: map[int64]*watch{}, wake: make(chan struct{}, 1), maxQueued: s.maxQueued}
	if st.maxQueued == 0 {
		st.maxQueued = maxQueuedEvents
	}
	return st
}

func (s *watchServer) Watch(ws etcdserverpb.Watch_WatchServer) error {
	st := s.newStream()
	defer st.close()
	recvErr := make(chan error, 1)
	go func() { recvErr <- s.recv(ws, st) }()

	tick := time.NewTicker(s.notifyInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-recvErr:
			return err
		case <-ws.Context().Done():
			return ws.Context().Err()
		case <-tick.C:
			st.progressTick(s.notifyInterval)
		case <-st.wake:
		}
		q, err := st.take()
		for _, r := range q {
			if err := ws.Send(r); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
}

// recv reads the client's requests until the stream ends.
func (s *watchServer) recv(ws etcdserverpb.Watch_WatchServer, st *watchStream) error {
	for {
		msg, err := ws.Recv()
		if err != nil {
			return err
		}
		switch {
		case msg.GetCreateRequest() != nil:
			s.create(ws.Context(), st, msg.GetCreateRequest())
		case msg.GetCancelRequest() != nil:
			st.cancelID(msg.GetCancelRequest().WatchId)
		case msg.GetProgressRequest() != nil:
			st.requestProgress()
		}
	}
}

// create starts a watch. As in kine, the server picks every watch's ID.
func (s *watchServer) create(ctx context.Context, st *watchStream, r *etcdserverpb.WatchCreateRequest) {
	h := st.hub
	if r.WatchId != clientv3.AutoWatchID || r.StartRevision < 0 {
		reason := server.ErrInvalidWatch.Error()
		if r.StartRevision < 0 {
			reason = server.ErrCompacted.Error()
		}
		h.mu.Lock()
		st.push(&etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: clientv3.InvalidWatchID,
			Created: true, Canceled: true, CancelReason: reason})
		h.mu.Unlock()
		return
	}
	key, end := string(r.Key), string(r.RangeEnd)
	if key == compactRevKey {
		key = compactRevAPI
	}
	w := &watch{stream: st, key: key, end: end, next: r.StartRevision, prevKV: r.PrevKv, progress: r.ProgressNotify}
	for _, f := range r.Filters {
		switch f {
		case etcdserverpb.WatchCreateRequest_NOPUT:
			w.noPut = true
		case etcdserverpb.WatchCreateRequest_NODELETE:
			w.noDelete = true
		}
	}

	// The created response is queued before the watch can be handed an
	// event: both happen under one hold of the hub's lock.
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.closed {
		return
	}
	w.id = st.nextID
	st.nextID++
	st.watches[w.id] = w
	if h.addLocked(w) {
		go h.catchUp(ctx, w, w.next)
	}
	st.push(&etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: w.id, Created: true})
}

// take empties the queue; the error is set once the stream has failed.
func (st *watchStream) take() ([]*etcdserverpb.WatchResponse, error) {
	st.hub.mu.Lock()
	defer st.hub.mu.Unlock()
	q := st.queue
	st.queue, st.queued = nil, 0
	return q, st.failed
}

// push queues r and wakes the sender. Callers hold the hub's lock.
func (st *watchStream) push(r *etcdserverpb.WatchResponse) {
	if st.closed || st.failed != nil {
		return
	}
	if st.queued > st.maxQueued && len(r.Events) > 0 {
		st.failed = status.Error(codes.Unavailable, "datastore: the watch stream's client is too slow")
	} else {
		st.queue = append(st.queue, r)
		st.queued += len(r.Events)
	}
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// cancel removes w and queues its cancel response r. Callers hold the hub's
// lock.
func (st *watchStream) cancel(w *watch, r *etcdserverpb.WatchResponse) {
	st.hub.removeLocked(w)
	st.push(r)
	st.progressIfWanted(st.hub.order.delivered)
}

// cancelID cancels the client's watch id, if it has one.
func (st *watchStream) cancelID(id int64) {
	h := st.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if w, ok := st.watches[id]; ok {
		st.cancel(w, &etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: id, Canceled: true})
	}
}

// requestProgress answers a progress request at the hub's revision, once no
// watch of the stream is catching up (etcd also answers only when all its
// watches are synced).
func (st *watchStream) requestProgress() {
	h := st.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	st.progressWanted = true
	st.progressIfWanted(h.order.delivered)
}

// progressIfWanted queues a requested progress notification at rev when no
// watch is catching up. Callers hold the hub's lock.
func (st *watchStream) progressIfWanted(rev int64) {
	if !st.progressWanted {
		return
	}
	for _, w := range st.watches {
		if w.catchingUp {
			return
		}
	}
	st.progressWanted = false
	st.push(&etcdserverpb.WatchResponse{Header: header(rev), WatchId: clientv3.InvalidWatchID})
}

// progressTick sends a progress notification to each watch that asked for
// them, is caught up and has been sent nothing for interval.
func (st *watchStream) progressTick(interval time.Duration) {
	h := st.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for _, w := range st.watches {
		if w.progress && !w.catchingUp && now.Sub(w.lastSent) >= interval {
			w.lastSent = now
			st.push(&etcdserverpb.WatchResponse{Header: header(h.order.delivered), WatchId: w.id})
		}
	}
}

// close removes every watch of the stream from the hub.
func (st *watchStream) close() {
	h := st.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	st.closed = true
	for _, w := range st.watches {
		h.removeLocked(w)
	}
	st.queue = nil
}
