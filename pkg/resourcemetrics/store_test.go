package resourcemetrics

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestStore runs scrapes through the store and checks the figures after
// the last: two points make a usage, a repeated point keeps the earlier
// one, a restart or a lower CPU counter has none until the next scrape.
func TestStore(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	const res = 15 * time.Second
	ref := types.NamespacedName{Namespace: "n", Name: "p"}
	nodeAt := func(s int, cpuSeconds float64, mem uint64) *batch {
		b := newBatch()
		b.nodes["n1"] = point{ts: at(s), cpu: uint64(cpuSeconds * 1e9), mem: mem}
		return b
	}
	podAt := func(containers map[string]point) *batch {
		b := newBatch()
		b.pods[ref] = containers
		return b
	}
	type want struct {
		ok     bool
		cpu    uint64 // nanocores
		mem    uint64
		ts     time.Time
		window time.Duration
	}
	tests := []struct {
		name     string
		scrapes  []*batch
		wantNode want
		wantPod  map[string]want // nil: the pod has no figures
	}{{
		name:    "one scrape: no rate yet",
		scrapes: []*batch{nodeAt(0, 10, 100)},
	}, {
		name:     "two scrapes",
		scrapes:  []*batch{nodeAt(0, 10, 100), nodeAt(15, 13, 200)},
		wantNode: want{ok: true, cpu: 200_000_000, mem: 200, ts: at(15), window: res},
	}, {
		name:     "the kubelet answers with its cached stats: the earlier point stands",
		scrapes:  []*batch{nodeAt(0, 10, 100), nodeAt(10, 12, 150), nodeAt(10, 12, 150)},
		wantNode: want{ok: true, cpu: 200_000_000, mem: 150, ts: at(10), window: 10 * time.Second},
	}, {
		name:    "the node rebooted: its counter went down",
		scrapes: []*batch{nodeAt(0, 100, 100), nodeAt(15, 1, 100)},
	}, {
		name:     "after the reboot, the next scrape has figures",
		scrapes:  []*batch{nodeAt(0, 100, 100), nodeAt(15, 1, 100), nodeAt(30, 4, 100)},
		wantNode: want{ok: true, cpu: 200_000_000, mem: 100, ts: at(30), window: res},
	}, {
		name:    "a node the last scrape missed has no figures",
		scrapes: []*batch{nodeAt(0, 10, 100), nodeAt(15, 13, 200), newBatch()},
	}, {
		name: "a pod with two containers",
		scrapes: []*batch{
			podAt(map[string]point{"a": {start: at(-100), ts: at(0), cpu: 1e9, mem: 5}, "b": {start: at(-100), ts: at(1), cpu: 1e9, mem: 6}}),
			podAt(map[string]point{"a": {start: at(-100), ts: at(15), cpu: 2.5e9, mem: 7}, "b": {start: at(-100), ts: at(16), cpu: 1e9, mem: 8}}),
		},
		wantPod: map[string]want{
			"a": {ok: true, cpu: 100_000_000, mem: 7, ts: at(15), window: res},
			"b": {ok: true, cpu: 0, mem: 8, ts: at(16), window: res},
		},
	}, {
		name: "a container restarted between the scrapes",
		scrapes: []*batch{
			podAt(map[string]point{"a": {start: at(-100), ts: at(0), cpu: 5e9, mem: 5}}),
			podAt(map[string]point{"a": {start: at(8), ts: at(15), cpu: 1e9, mem: 7}}),
		},
	}, {
		name: "a container restarted more than 10 s before the scrape: its start counts",
		scrapes: []*batch{
			podAt(map[string]point{"a": {start: at(-100), ts: at(0), cpu: 5e9, mem: 5}}),
			podAt(map[string]point{"a": {start: at(3), ts: at(15), cpu: 3e9, mem: 7}}),
		},
		wantPod: map[string]want{"a": {ok: true, cpu: 250_000_000, mem: 7, ts: at(15), window: 12 * time.Second}},
	}, {
		name: "a container a scrape first sees: none yet",
		scrapes: []*batch{
			podAt(map[string]point{"a": {start: at(-100), ts: at(0), cpu: 5e9, mem: 5}}),
			podAt(map[string]point{"a": {start: at(-100), ts: at(15), cpu: 6e9, mem: 5}, "new": {start: at(13), ts: at(15), cpu: 1e9, mem: 1}}),
		},
	}, {
		name: "a fresh container: its start counts as a point after 10 s",
		scrapes: []*batch{
			podAt(map[string]point{"a": {start: at(0), ts: at(12), cpu: 3e9, mem: 9}}),
		},
		wantPod: map[string]want{"a": {ok: true, cpu: 250_000_000, mem: 9, ts: at(12), window: 12 * time.Second}},
	}, {
		name: "a container younger than 10 s has none",
		scrapes: []*batch{
			podAt(map[string]point{"a": {start: at(0), ts: at(5), cpu: 1e9, mem: 9}}),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(res)
			for _, b := range tt.scrapes {
				s.put(b)
			}
			u, ok := s.node("n1")
			if ok != tt.wantNode.ok || ok && (u.cpu != tt.wantNode.cpu || u.mem != tt.wantNode.mem || !u.ts.Equal(tt.wantNode.ts) || u.window != tt.wantNode.window) {
				t.Errorf("node: %+v (ok %v), want %+v", u, ok, tt.wantNode)
			}
			cs, earliest, ok := s.pod(ref)
			if ok != (tt.wantPod != nil) {
				t.Fatalf("pod has figures: %v, want %v (%+v)", ok, tt.wantPod != nil, cs)
			}
			if !ok {
				return
			}
			if len(cs) != len(tt.wantPod) {
				t.Errorf("containers %+v, want %+v", cs, tt.wantPod)
			}
			var first time.Time
			for _, c := range cs {
				w := tt.wantPod[c.name]
				if c.cpu != w.cpu || c.mem != w.mem || !c.ts.Equal(w.ts) || c.window != w.window {
					t.Errorf("container %s: %+v, want %+v", c.name, c.usage, w)
				}
				if first.IsZero() || w.ts.Before(first) {
					first = w.ts
				}
			}
			if !earliest.ts.Equal(first) {
				t.Errorf("pod's timestamp %s, want the earliest container's %s", earliest.ts, first)
			}
			if n, p := s.counts(); n != boolInt(tt.wantNode.ok) || p != 1 {
				t.Errorf("counts %d nodes, %d pods", n, p)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
