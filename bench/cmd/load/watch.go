package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Resource versions are compared as integers: both etcd and kine hand out
// increasing revisions. This is a test tool's assumption, not the API's.
func parseRV(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

type pendingWrite struct {
	name       string
	start, ack time.Time
}

// watcher is one watch and the ledger that matches acknowledged writes to
// the events it receives: a write acknowledged before its event arrives waits
// in pending, an event that arrives before the write's response waits in
// early. A pending write older than the bound is missed.
type watcher struct {
	id       int
	selector string // "" watches the whole namespace
	cs       *kubernetes.Clientset

	mu        sync.Mutex
	pending   map[uint64]pendingWrite
	early     map[uint64]time.Time
	delivery  []time.Duration // write request start -> event received
	expected  int
	matched   int
	events    int
	bookmarks int
	opened    int // watch requests that succeeded (1 + re-establishments)
	relists   int // 410 Gone: resumed from a fresh list
	resolved  int // pending writes resolved by a relist instead of an event
	missed    int
	errors    int
	messages  []string
	lastEvent time.Time
}

func (w *watcher) fail(format string, args ...any) {
	w.errors++
	if len(w.messages) < 3 {
		w.messages = append(w.messages, fmt.Sprintf("watch %d (%s): ", w.id, w.describe())+fmt.Sprintf(format, args...))
	}
}

func (w *watcher) describe() string {
	if w.selector == "" {
		return "namespace"
	}
	return w.selector
}

// acknowledge records a write this watch must see.
func (w *watcher) acknowledge(rv uint64, p pendingWrite) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expected++
	if at, ok := w.early[rv]; ok {
		delete(w.early, rv)
		w.matched++
		w.delivery = append(w.delivery, at.Sub(p.start))
		return
	}
	w.pending[rv] = p
}

// event records an ADDED/MODIFIED event.
func (w *watcher) event(rv uint64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	w.lastEvent = at
	if p, ok := w.pending[rv]; ok {
		delete(w.pending, rv)
		w.matched++
		w.delivery = append(w.delivery, at.Sub(p.start))
		return
	}
	w.early[rv] = at
}

// sweep fails pending writes acknowledged longer than bound ago (all of them
// when bound is 0) and forgets unmatched events older than keep.
func (w *watcher) sweep(now time.Time, bound, keep time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for rv, p := range w.pending {
		if bound == 0 || now.Sub(p.ack) > bound {
			delete(w.pending, rv)
			w.missed++
			if len(w.messages) < 3 {
				w.messages = append(w.messages, fmt.Sprintf("watch %d (%s): no event for %s at resourceVersion %d %s after it was acknowledged",
					w.id, w.describe(), p.name, rv, now.Sub(p.ack).Round(time.Millisecond)))
			}
		}
	}
	for rv, at := range w.early {
		if now.Sub(at) > keep {
			delete(w.early, rv)
		}
	}
}

// relisted resolves the pending writes a fresh list at listRV covers.
func (w *watcher) relisted(listRV uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.relists++
	for rv := range w.pending {
		if rv <= listRV {
			delete(w.pending, rv)
			w.resolved++
		}
	}
}

func (w *watcher) pendingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// list returns the collection's current resourceVersion.
func (w *watcher) list(ctx context.Context, ns string) (string, error) {
	l, err := w.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: w.selector, Limit: 1})
	if err != nil {
		return "", err
	}
	// A limited list's resourceVersion is the snapshot's, valid to watch from.
	return l.ResourceVersion, nil
}

// open starts one watch request from rv.
func (w *watcher) open(ctx context.Context, o *options, rv string, rng *mrand.Rand) (watch.Interface, error) {
	lo := metav1.ListOptions{LabelSelector: w.selector, ResourceVersion: rv, AllowWatchBookmarks: true}
	if o.watchTimeout > 0 {
		secs := int64((o.watchTimeout/2 + time.Duration(rng.Int64N(int64(o.watchTimeout)))) / time.Second)
		lo.TimeoutSeconds = &secs
	}
	return w.cs.CoreV1().ConfigMaps(o.namespace).Watch(ctx, lo)
}

// loop keeps the watch open until ctx ends, resuming from the last
// resourceVersion it saw (event or bookmark) whenever the server ends it,
// and from a fresh list when that version is gone (410).
func (w *watcher) loop(ctx context.Context, o *options, rv string, first watch.Interface) {
	rng := mrand.New(mrand.NewPCG(uint64(w.id), uint64(time.Now().UnixNano())))
	wi := first
	for {
		gone := false
		for ev := range wi.ResultChan() {
			now := time.Now()
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					w.mu.Lock()
					w.fail("unexpected object %T", ev.Object)
					w.mu.Unlock()
					continue
				}
				rv = cm.ResourceVersion
				if ev.Type != watch.Deleted {
					w.event(parseRV(rv), now)
				} else {
					w.mu.Lock()
					w.events++
					w.lastEvent = now
					w.mu.Unlock()
				}
			case watch.Bookmark:
				if m, err := metaAccessor(ev.Object); err == nil {
					rv = m
				}
				w.mu.Lock()
				w.bookmarks++
				w.mu.Unlock()
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					gone = true
				} else if ctx.Err() == nil {
					w.mu.Lock()
					w.fail("watch error event: %v", err)
					w.mu.Unlock()
				}
			}
		}
		wi.Stop()
		if ctx.Err() != nil {
			return
		}
		// The server ended the watch (timeout) or it broke: re-establish.
		for {
			var err error
			if gone {
				rv, err = w.list(ctx, o.namespace)
				if err == nil {
					w.relisted(parseRV(rv))
				}
			}
			if err == nil {
				wi, err = w.open(ctx, o, rv, rng)
			}
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				w.mu.Lock()
				w.opened++
				w.mu.Unlock()
				break
			}
			gone = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
			if !gone && !apierrors.IsTooManyRequests(err) {
				w.mu.Lock()
				w.fail("re-establish from resourceVersion %s: %v", rv, err)
				w.mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func metaAccessor(obj any) (string, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		return cm.ResourceVersion, nil
	}
	return "", fmt.Errorf("bookmark of type %T", obj)
}

// watchSet is every watch and which of them each label group's writes reach.
type watchSet struct {
	o       *options
	runID   string
	all     []*watcher
	byGroup map[string][]*watcher
	wg      sync.WaitGroup
}

func newWatchSet(o *options, runID string) *watchSet {
	ws := &watchSet{o: o, runID: runID, byGroup: map[string][]*watcher{}}
	var nsWide []*watcher
	for j := 0; j < o.watches; j++ {
		w := &watcher{id: j, pending: map[uint64]pendingWrite{}, early: map[uint64]time.Time{}}
		if o.nsWatchEvery > 0 && j%o.nsWatchEvery == 0 {
			nsWide = append(nsWide, w)
		} else {
			g := "g" + strconv.Itoa(j%o.groups)
			w.selector = groupLabel + "=" + g
			ws.byGroup[g] = append(ws.byGroup[g], w)
		}
		ws.all = append(ws.all, w)
	}
	for g := 0; g < o.groups; g++ {
		name := "g" + strconv.Itoa(g)
		ws.byGroup[name] = append(ws.byGroup[name], nsWide...)
	}
	return ws
}

// start lists and opens every watch (each on its own connection) before
// returning, so that every later write has its watches in place.
func (ws *watchSet) start(ctx context.Context, base *rest.Config) error {
	var mu sync.Mutex
	var firstErr error
	var setup sync.WaitGroup
	sem := make(chan struct{}, 10)
	for _, w := range ws.all {
		setup.Add(1)
		go func() {
			defer setup.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			err := func() error {
				cs, err := newClientset(base, ws.o.protobuf, nil)
				if err != nil {
					return err
				}
				w.cs = cs
				rv, err := w.list(ctx, ws.o.namespace)
				if err != nil {
					return err
				}
				rng := mrand.New(mrand.NewPCG(uint64(w.id), 1))
				wi, err := w.open(ctx, ws.o, rv, rng)
				if err != nil {
					return err
				}
				w.opened = 1
				ws.wg.Add(1)
				go func() {
					defer ws.wg.Done()
					w.loop(ctx, ws.o, rv, wi)
				}()
				return nil
			}()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("open watch %d: %w", w.id, err)
				}
				mu.Unlock()
			}
		}()
	}
	setup.Wait()
	return firstErr
}

// acknowledged tells every watch that should see it about a write.
func (ws *watchSet) acknowledged(group, name, rv string, start, ack time.Time) {
	n := parseRV(rv)
	for _, w := range ws.byGroup[group] {
		w.acknowledge(n, pendingWrite{name: name, start: start, ack: ack})
	}
}

// sweepEvery fails overdue writes while the run goes on.
func (ws *watchSet) sweepEvery(ctx context.Context, every time.Duration) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				for _, w := range ws.all {
					w.sweep(now, ws.o.watchBound, 2*time.Minute)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// drain waits up to bound for the pending writes to arrive, then fails the rest.
func (ws *watchSet) drain(ctx context.Context, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := 0
		for _, w := range ws.all {
			n += w.pendingCount()
		}
		if n == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	now := time.Now()
	for _, w := range ws.all {
		w.sweep(now, 0, 0)
	}
}

func (ws *watchSet) wait() { ws.wg.Wait() }
