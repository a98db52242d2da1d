package resourcemetrics

import (
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// freshContainerMin is how long a container must have run before its
// start (zero CPU at its start time) counts as a point to compute a usage
// from: over a shorter window the figure is mostly start-up noise.
const freshContainerMin = 10 * time.Second

// series is a node's or a container's last two points: a usage is the CPU
// used between them over the window they span, and the last memory figure.
type series struct {
	last, prev point
	hasPrev    bool
}

// usage is what the API reports for a node or a container.
type usage struct {
	ts     time.Time     // when the window ends (the last point)
	window time.Duration // the window the CPU rate is over
	cpu    uint64        // nanocores
	mem    uint64        // bytes
}

// usage computes s's usage; ok is false without two points, or when the
// later point is not newer or its cumulative CPU is lower (the node
// rebooted, the container restarted).
func (s series) usage() (usage, bool) {
	if !s.hasPrev || !s.last.ts.After(s.prev.ts) || s.last.cpu < s.prev.cpu || s.last.start.Before(s.prev.start) {
		return usage{}, false
	}
	window := s.last.ts.Sub(s.prev.ts)
	rate := float64(s.last.cpu-s.prev.cpu) / window.Seconds()
	if rate > math.MaxInt64 {
		return usage{}, false
	}
	return usage{ts: s.last.ts, window: window, cpu: uint64(rate), mem: s.last.mem}, true
}

// nextNode is a node's series after the scrape that found p; old is the
// series before it (found: there was one).
func nextNode(old series, found bool, p point) series {
	s := series{last: p}
	switch {
	case !found:
	case p.ts.After(old.last.ts):
		s.prev, s.hasPrev = old.last, true
	case old.hasPrev && old.prev.ts.Before(p.ts):
		// The kubelet answered with the stats it had cached at the last
		// scrape: the earlier point still stands.
		s.prev, s.hasPrev = old.prev, true
	}
	return s
}

// nextContainer is nextNode for a container, which may have restarted
// since the last point (its start is then not before that point), and
// whose start counts as a point once it is at least freshContainerMin and
// less than a resolution old, so that a new pod has figures after one
// scrape instead of two.
func nextContainer(old series, found bool, p point, resolution time.Duration) series {
	s := series{last: p}
	age := p.ts.Sub(p.start)
	switch {
	case !p.start.IsZero() && age >= freshContainerMin && age < resolution:
		s.prev, s.hasPrev = point{start: p.start, ts: p.start}, true
	case !found || !p.start.Before(old.last.ts):
	case p.ts.After(old.last.ts):
		s.prev, s.hasPrev = old.last, true
	case old.hasPrev && old.prev.ts.Before(p.ts):
		s.prev, s.hasPrev = old.prev, true
	}
	return s
}

// store holds the last two points of every node and container the last
// scrape found. A node or pod the last scrape did not find (it is gone,
// or its kubelet did not answer) has no figures: none are served stale.
type store struct {
	resolution time.Duration

	mu    sync.RWMutex
	nodes map[string]series
	pods  map[types.NamespacedName]map[string]series
}

func newStore(resolution time.Duration) *store {
	return &store{resolution: resolution, nodes: map[string]series{}, pods: map[types.NamespacedName]map[string]series{}}
}

// put replaces the store's content with what b found, each series moved on
// by its new point.
func (s *store) put(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes := make(map[string]series, len(b.nodes))
	for name, p := range b.nodes {
		old, found := s.nodes[name]
		nodes[name] = nextNode(old, found, p)
	}
	pods := make(map[types.NamespacedName]map[string]series, len(b.pods))
	for ref, pp := range b.pods {
		oldPod := s.pods[ref]
		containers := make(map[string]series, len(pp))
		for name, p := range pp {
			old, found := oldPod[name]
			containers[name] = nextContainer(old, found, p, s.resolution)
		}
		pods[ref] = containers
	}
	s.nodes, s.pods = nodes, pods
}

// node is node name's usage; ok is false when there is none yet.
func (s *store) node(name string) (usage, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	se, found := s.nodes[name]
	if !found {
		return usage{}, false
	}
	return se.usage()
}

// containerUsage is one container's usage in a pod.
type containerUsage struct {
	name string
	usage
}

// pod is the usage of each container of pod ref, and the window of the
// container measured earliest (the pod's figures are as of then); ok is
// false unless every container has a usage.
func (s *store) pod(ref types.NamespacedName) (cs []containerUsage, earliest usage, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	containers, found := s.pods[ref]
	if !found || len(containers) == 0 {
		return nil, usage{}, false
	}
	cs = make([]containerUsage, 0, len(containers))
	for name, se := range containers {
		u, ok := se.usage()
		if !ok {
			return nil, usage{}, false
		}
		cs = append(cs, containerUsage{name: name, usage: u})
		if earliest.ts.IsZero() || u.ts.Before(earliest.ts) {
			earliest = u
		}
	}
	return cs, earliest, true
}

// counts is how many nodes and pods have figures, for the log.
func (s *store) counts() (nodes, pods int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, se := range s.nodes {
		if _, ok := se.usage(); ok {
			nodes++
		}
	}
	for ref := range s.pods {
		containers := s.pods[ref]
		all := len(containers) > 0
		for _, se := range containers {
			if _, ok := se.usage(); !ok {
				all = false
				break
			}
		}
		if all {
			pods++
		}
	}
	return nodes, pods
}
