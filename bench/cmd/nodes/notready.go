package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// notReadyWatch watches the fleet's Nodes and records every time a node
// whose process lives has a Ready condition that is not True, and how long
// until the watch sees it True again. A watch sees each status write, so a
// NotReady that the next heartbeat clears within a second is counted too (a
// poll every few seconds would miss it); only a NotReady written and cleared
// while the watch is broken and relisting goes unseen. Durations are from
// the watch event that showed the node not Ready to the one that showed it
// Ready (both carry the watch's delay, which cancels out), not the
// condition's lastTransitionTime (whole seconds, written by two different
// clocks: the node's and the node lifecycle controller's).
type notReadyWatch struct {
	index map[string]int // node name -> the simulator's index
	alive func(i int) bool
	clock clock.PassiveClock

	mu     sync.Mutex
	since  map[string]time.Time // not Ready now, since
	nodes  map[string]bool      // not Ready at least once
	closed []time.Duration      // the episodes that ended, in the order they ended
}

// notReadyCounts are a watch's figures: the nodes that were not Ready at
// least once, and the duration of each time a node went from Ready (or
// unseen) to not Ready; an episode still open counts until now.
type notReadyCounts struct {
	nodes     int
	durations []time.Duration
	open      int // of durations, the episodes not over yet (the last ones)
}

func (c notReadyCounts) episodes() int { return len(c.durations) }

// longest and total of the episodes' durations.
func (c notReadyCounts) longest() time.Duration {
	var m time.Duration
	for _, d := range c.durations {
		m = max(m, d)
	}
	return m
}

func (c notReadyCounts) total() time.Duration {
	var s time.Duration
	for _, d := range c.durations {
		s += d
	}
	return s
}

// watchNotReady starts the watch of names (node name -> index for alive) and
// returns once it has listed the Nodes; it ends with ctx.
func watchNotReady(ctx context.Context, cs kubernetes.Interface, names map[string]int, alive func(int) bool) (*notReadyWatch, error) {
	return watchNotReadyClock(ctx, cs, names, alive, clock.RealClock{})
}

func watchNotReadyClock(ctx context.Context, cs kubernetes.Interface, names map[string]int, alive func(int) bool, clk clock.PassiveClock) (*notReadyWatch, error) {
	w := &notReadyWatch{index: names, alive: alive, clock: clk, since: map[string]time.Time{}, nodes: map[string]bool{}}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.see,
		UpdateFunc: func(_, obj any) { w.see(obj) },
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watching Nodes: not listed within a minute")
	}
	return w, nil
}

func (w *notReadyWatch) see(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	i, ok := w.index[n.Name]
	if !ok {
		return
	}
	ready := nodeReady(n) == corev1.ConditionTrue
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	since, down := w.since[n.Name]
	switch {
	case ready && down:
		delete(w.since, n.Name)
		w.closed = append(w.closed, now.Sub(since))
	case !ready && !down && w.alive(i):
		w.since[n.Name] = now
		w.nodes[n.Name] = true
	}
}

// counts are the watch's figures so far.
func (w *notReadyWatch) counts() notReadyCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	c := notReadyCounts{nodes: len(w.nodes), durations: append([]time.Duration(nil), w.closed...)}
	for _, since := range w.since {
		c.durations = append(c.durations, now.Sub(since))
	}
	c.open = len(w.since)
	return c
}
