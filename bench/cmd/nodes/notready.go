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
)

// notReadyWatch watches the fleet's Nodes and counts every time a node whose
// process lives has a Ready condition that is not True. A watch sees each
// status write, so a NotReady that the next heartbeat clears within a second
// is counted too (a poll every few seconds would miss it); only a NotReady
// written and cleared while the watch is broken and relisting goes unseen.
type notReadyWatch struct {
	index map[string]int // node name -> the simulator's index
	alive func(i int) bool

	mu       sync.Mutex
	down     map[string]bool // not Ready now
	nodes    map[string]bool // not Ready at least once
	episodes int
}

// watchNotReady starts the watch of names (node name -> index for alive) and
// returns once it has listed the Nodes; it ends with ctx.
func watchNotReady(ctx context.Context, cs kubernetes.Interface, names map[string]int, alive func(int) bool) (*notReadyWatch, error) {
	w := &notReadyWatch{index: names, alive: alive, down: map[string]bool{}, nodes: map[string]bool{}}
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
	switch {
	case ready:
		delete(w.down, n.Name)
	case !w.down[n.Name] && w.alive(i):
		w.down[n.Name] = true
		w.nodes[n.Name] = true
		w.episodes++
	}
}

// counts are the nodes that were not Ready at least once, and the times a
// node went from Ready (or unseen) to not Ready.
func (w *notReadyWatch) counts() (nodes, episodes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.nodes), w.episodes
}
