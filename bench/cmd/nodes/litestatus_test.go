package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestStatusChanged(t *testing.T) {
	n := &liteNode{name: "lite-7", ip: liteNodeIP(7)}
	t0 := time.Unix(1_800_000_000, 0)
	var base corev1.NodeStatus
	n.setStatus(&base, t0)
	for _, tc := range []struct {
		name string
		edit func(*corev1.NodeStatus)
		want bool
	}{
		{"heartbeat only", func(s *corev1.NodeStatus) { n.setStatus(s, t0.Add(10*time.Second)) }, false},
		{"Ready Unknown from the controller", func(s *corev1.NodeStatus) {
			for i := range s.Conditions {
				if s.Conditions[i].Type == corev1.NodeReady {
					s.Conditions[i].Status = corev1.ConditionUnknown
				}
			}
		}, true},
		{"conditions reordered", func(s *corev1.NodeStatus) {
			s.Conditions[0], s.Conditions[3] = s.Conditions[3], s.Conditions[0]
		}, false},
		{"a condition of someone else", func(s *corev1.NodeStatus) {
			s.Conditions = append(s.Conditions, corev1.NodeCondition{Type: "NetworkUnavailable", Status: corev1.ConditionFalse})
		}, true},
		{"address", func(s *corev1.NodeStatus) { s.Addresses[0].Address = "198.18.0.99" }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := *base.DeepCopy()
			tc.edit(&s)
			if got := statusChanged(&base, &s); got != tc.want {
				t.Errorf("statusChanged = %v, want %v", got, tc.want)
			}
		})
	}

	// The kubelet's setters keep a transition time while the status stays,
	// and move it when the status changes (here: Unknown back to True).
	s := *base.DeepCopy()
	s.Conditions[3].Status = corev1.ConditionUnknown
	n.setStatus(&s, t0.Add(time.Minute))
	for _, c := range s.Conditions {
		want := metav1.NewTime(t0)
		if c.Type == corev1.NodeReady {
			want = metav1.NewTime(t0.Add(time.Minute))
		}
		if !c.LastTransitionTime.Equal(&want) || !c.LastHeartbeatTime.Time.Equal(t0.Add(time.Minute)) {
			t.Errorf("%s: transition %s heartbeat %s, want %s and %s", c.Type, c.LastTransitionTime, c.LastHeartbeatTime, want, t0.Add(time.Minute))
		}
	}
}

func TestLiteAddresses(t *testing.T) {
	for _, tc := range []struct {
		i    int
		want string
	}{{0, "198.18.0.1"}, {254, "198.18.0.255"}, {255, "198.18.1.0"}, {4999, "198.18.19.136"}} {
		if got := liteNodeIP(tc.i).String(); got != tc.want {
			t.Errorf("liteNodeIP(%d) = %s, want %s", tc.i, got, tc.want)
		}
	}
	n := &liteNode{name: "lite-3", index: 3}
	n.nodeStore = newNodeStore(t, "")
	n.pods = &podTracker{n: n}
	if got := n.pods.podIP(); got != "100.64.3.2" {
		t.Errorf("first pod IP without a podCIDR = %s, want 100.64.3.2", got)
	}
	n.nodeStore = newNodeStore(t, "10.42.7.0/24")
	for _, want := range []string{"10.42.7.3", "10.42.7.4"} {
		if got := n.pods.podIP(); got != want {
			t.Errorf("pod IP in 10.42.7.0/24 = %s, want %s", got, want)
		}
	}
}

func TestRequestKind(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        int
	}{
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/lite-1?timeout=10s", reqLeaseUpdate},
		{http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", reqLeaseCreate},
		{http.MethodPatch, "/api/v1/nodes/lite-1/status?timeout=10s", reqNodeStatusPatch},
		{http.MethodPatch, "/api/v1/namespaces/default/pods/p/status", reqPodStatusPatch},
		{http.MethodDelete, "/api/v1/namespaces/default/pods/p", reqPodDelete},
		{http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3Dlite-1&watch=true", reqWatch},
		{http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3Dlite-1", reqList},
	} {
		if got := requestKind(httptest.NewRequest(tc.method, tc.url, nil)); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.method, tc.url, reqKindNames[got], reqKindNames[tc.want])
		}
	}
}

// newNodeStore is a node informer's store holding lite-3 with podCIDR.
func newNodeStore(t *testing.T, podCIDR string) cache.Store {
	t.Helper()
	s := cache.NewStore(cache.MetaNamespaceKeyFunc)
	if err := s.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lite-3"}, Spec: corev1.NodeSpec{PodCIDR: podCIDR}}); err != nil {
		t.Fatal(err)
	}
	return s
}
