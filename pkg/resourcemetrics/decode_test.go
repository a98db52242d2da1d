package resourcemetrics

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// kubeletBody is a kubelet's /metrics/resource answer as the kubelet of
// Kubernetes v1.37 writes it (its collector's test, with a node added):
// pod_a has two containers, pod_b one; container_start_time_seconds has
// no timestamp.
const kubeletBody = `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="container_a",namespace="namespace_a",pod="pod_a"} 10 1624396278302
container_cpu_usage_seconds_total{container="container_a",namespace="namespace_b",pod="pod_b"} 10 1624396278302
container_cpu_usage_seconds_total{container="container_b",namespace="namespace_a",pod="pod_a"} 2.5 1624396278302
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="container_a",namespace="namespace_a",pod="pod_a"} 1000 1624396278302
container_memory_working_set_bytes{container="container_a",namespace="namespace_b",pod="pod_b"} 1.2e+07 1624396278302
container_memory_working_set_bytes{container="container_b",namespace="namespace_a",pod="pod_a"} 3000 1624396278302
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="container_a",namespace="namespace_a",pod="pod_a"} 1.6243962483020916e+09
container_start_time_seconds{container="container_a",namespace="namespace_b",pod="pod_b"} 1.6243956783020916e+09
container_start_time_seconds{container="container_b",namespace="namespace_a",pod="pod_a"} 1.6243961583020916e+09
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes.
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="container_a",namespace="namespace_a",pod="pod_a"} 1000 1624396278302
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35 1624396278302
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.0407936e+09 1624396278302
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="namespace_a",pod="pod_a"} 12.5 1624396278302
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
# HELP scrape_error [ALPHA] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE scrape_error gauge
scrape_error 0
`

func TestDecode(t *testing.T) {
	at := time.UnixMilli(1624396278302)
	now := time.Unix(1700000000, 0)
	podA := types.NamespacedName{Namespace: "namespace_a", Name: "pod_a"}
	podB := types.NamespacedName{Namespace: "namespace_b", Name: "pod_b"}
	tests := []struct {
		name      string
		body      string
		wantNode  *point
		wantPods  map[types.NamespacedName]podPoint
		wantError string
	}{{
		name:     "a kubelet's answer",
		body:     kubeletBody,
		wantNode: &point{ts: at, cpu: 357_350_000_000, mem: 1_040_793_600},
		wantPods: map[types.NamespacedName]podPoint{
			podA: {
				"container_a": {start: time.Unix(0, 1624396248302091600), ts: at, cpu: 10e9, mem: 1000},
				"container_b": {start: time.Unix(0, 1624396158302091600), ts: at, cpu: 2.5e9, mem: 3000},
			},
			podB: {"container_a": {start: time.Unix(0, 1624395678302091600), ts: at, cpu: 10e9, mem: 12e6}},
		},
	}, {
		name: "no timestamps: taken at the request",
		body: "node_cpu_usage_seconds_total 2\nnode_memory_working_set_bytes 4096\n" +
			`container_cpu_usage_seconds_total{container="c",namespace="n",pod="p"} 1` + "\n" +
			`container_memory_working_set_bytes{container="c",namespace="n",pod="p"} 10` + "\n",
		wantNode: &point{ts: now, cpu: 2e9, mem: 4096},
		wantPods: map[types.NamespacedName]podPoint{{Namespace: "n", Name: "p"}: {"c": {ts: now, cpu: 1e9, mem: 10}}},
	}, {
		name: "a container without figures yet leaves its pod out",
		body: "node_cpu_usage_seconds_total 2 1000\nnode_memory_working_set_bytes 4096 1000\n" +
			`container_cpu_usage_seconds_total{container="c",namespace="n",pod="p"} 1 1000` + "\n" +
			`container_memory_working_set_bytes{container="c",namespace="n",pod="p"} 10 1000` + "\n" +
			`container_cpu_usage_seconds_total{container="new",namespace="n",pod="p"} 0 1000` + "\n" +
			`container_memory_working_set_bytes{container="new",namespace="n",pod="p"} 0 1000` + "\n" +
			`container_cpu_usage_seconds_total{container="c",namespace="n",pod="q"} 1 1000` + "\n" +
			`container_memory_working_set_bytes{container="c",namespace="n",pod="q"} 10 1000` + "\n",
		wantNode: &point{ts: time.UnixMilli(1000), cpu: 2e9, mem: 4096},
		wantPods: map[types.NamespacedName]podPoint{{Namespace: "n", Name: "q"}: {"c": {ts: time.UnixMilli(1000), cpu: 1e9, mem: 10}}},
	}, {
		name:     "a node without its memory figure is left out",
		body:     "node_cpu_usage_seconds_total 2 1000\n",
		wantPods: map[types.NamespacedName]podPoint{},
	}, {
		name: "escaped label values, other label order, spaces",
		body: `node_cpu_usage_seconds_total  1  5` + "\n" + `node_memory_working_set_bytes 1 5` + "\n" +
			`container_cpu_usage_seconds_total{ pod="p}\"x", namespace="n\\s" ,container="c"} 3 5` + "\n" +
			`container_memory_working_set_bytes{pod="p}\"x",namespace="n\\s",container="c",} 7 5` + "\n",
		wantNode: &point{ts: time.UnixMilli(5), cpu: 1e9, mem: 1},
		wantPods: map[types.NamespacedName]podPoint{{Namespace: `n\s`, Name: `p}"x`}: {"c": {ts: time.UnixMilli(5), cpu: 3e9, mem: 7}}},
	}, {
		name:      "a value that is not a number",
		body:      "node_cpu_usage_seconds_total x 5\n",
		wantError: `line 1: node_cpu_usage_seconds_total: value`,
	}, {
		name:      "a container sample without its pod",
		body:      `container_cpu_usage_seconds_total{container="c",namespace="n"} 3 5` + "\n",
		wantError: `line 1: container_cpu_usage_seconds_total: labels "container=\"c\",namespace=\"n\"" lack namespace, pod or container`,
	}, {
		name:      "an unterminated label set",
		body:      `container_cpu_usage_seconds_total{container="c} 3 5` + "\n",
		wantError: `line 1: unterminated label set`,
	}, {
		name:      "a timestamp that is not an integer",
		body:      "# a comment\n\nnode_memory_working_set_bytes 1 5.5\n",
		wantError: `line 3: node_memory_working_set_bytes: timestamp`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := decode(strings.NewReader(tt.body), "n1", now)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := b.nodes["n1"]
			switch {
			case tt.wantNode == nil && ok:
				t.Errorf("node point %+v, want none", got)
			case tt.wantNode != nil && !ok:
				t.Errorf("no node point, want %+v", *tt.wantNode)
			case tt.wantNode != nil && !samePoint(got, *tt.wantNode):
				t.Errorf("node point %+v, want %+v", got, *tt.wantNode)
			}
			if len(b.pods) != len(tt.wantPods) {
				t.Errorf("%d pods %v, want %d", len(b.pods), b.pods, len(tt.wantPods))
			}
			for ref, want := range tt.wantPods {
				gotPod := b.pods[ref]
				if len(gotPod) != len(want) {
					t.Errorf("%s: containers %v, want %v", ref, gotPod, want)
				}
				for name, w := range want {
					if g := gotPod[name]; !samePoint(g, w) {
						t.Errorf("%s/%s: %+v, want %+v", ref, name, g, w)
					}
				}
			}
		})
	}
}

// samePoint compares points, start times to the microsecond (a float of
// seconds since the epoch holds no more).
func samePoint(a, b point) bool {
	d := a.start.Sub(b.start)
	return d > -time.Microsecond && d < time.Microsecond && a.ts.Equal(b.ts) && a.cpu == b.cpu && a.mem == b.mem
}

// TestDecodeBounded: an answer larger than maxBody is refused; one of
// maxBody is read.
func TestDecodeBounded(t *testing.T) {
	line := "node_memory_working_set_bytes 1 5\n"
	last := "node_cpu_usage_seconds_total 2 5\n"
	fill := strings.Repeat(line, (maxBody-len(last))/len(line))
	pad := strings.Repeat("#", maxBody-len(fill)-len(last)-1) + "\n"
	for _, tt := range []struct {
		name    string
		body    string
		wantErr bool
	}{
		{"exactly the bound", fill + pad + last, false},
		{"one byte more", fill + pad + "\n" + last, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := decode(strings.NewReader(tt.body), "n1", time.Now())
			if tt.wantErr {
				if err != errTooLarge {
					t.Fatalf("error %v, want %v", err, errTooLarge)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := b.nodes["n1"]; !ok {
				t.Error("the node's figures at the end of the answer were not read")
			}
		})
	}
}
