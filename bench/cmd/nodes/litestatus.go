package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/version"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
)

// liteCapacity is what every lite node offers: 4 CPUs, 8 GiB, 110 pods (the
// kubelet's max-pods). Allocatable is capacity less the kubelet's default
// hard eviction thresholds (memory.available 100Mi, nodefs.available 10%).
func liteCapacity() (capacity, allocatable corev1.ResourceList) {
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
	}
	allocatable = capacity.DeepCopy()
	allocatable[corev1.ResourceMemory] = resource.MustParse("8092Mi")
	allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse("45Gi")
	return capacity, allocatable
}

// initialNode is the Node the kubelet registers (initialNode in
// pkg/kubelet/kubelet_node_status.go): its labels, the controller-managed
// attach/detach annotation of the kubelet's defaults, and its status.
func (n *liteNode) initialNode(now time.Time) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name,
			Labels: map[string]string{
				corev1.LabelHostname:          n.name,
				corev1.LabelOSStable:          runtime.GOOS,
				corev1.LabelArchStable:        runtime.GOARCH,
				"beta.kubernetes.io/os":       runtime.GOOS,
				"beta.kubernetes.io/arch":     runtime.GOARCH,
				"edgeplane.io/hollow":         "true", // the benchmark's node selector
				"edgeplane.io/node-simulator": simLite,
			},
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
	}
	n.setStatus(&node.Status, now)
	return node
}

// setStatus is the kubelet's status setters on s (a copy of the Node's
// status): addresses, capacity, node info, daemon endpoints, and the
// pressure and Ready conditions with heartbeat now. A condition keeps its
// transition time while its status stays; conditions of others stay.
func (n *liteNode) setStatus(s *corev1.NodeStatus, now time.Time) {
	s.Capacity, s.Allocatable = liteCapacity()
	s.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: n.ip.String()},
		{Type: corev1.NodeHostName, Address: n.name},
	}
	s.DaemonEndpoints.KubeletEndpoint.Port = 10250
	id := sha256.Sum256([]byte(n.name))
	machineID := hex.EncodeToString(id[:16])
	s.NodeInfo = corev1.NodeSystemInfo{
		MachineID:               machineID,
		SystemUUID:              machineID,
		BootID:                  hex.EncodeToString(id[16:]),
		KernelVersion:           "6.1.0-lite",
		OSImage:                 "edgeplane lite node",
		ContainerRuntimeVersion: "lite://0.1.0",
		KubeletVersion:          version.Get().GitVersion,
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
	}
	for _, c := range []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
		{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
		{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
	} {
		c.LastHeartbeatTime = metav1.NewTime(now)
		c.LastTransitionTime = metav1.NewTime(now)
		i, old := nodeutil.GetNodeCondition(s, c.Type)
		if old == nil {
			s.Conditions = append(s.Conditions, c)
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		s.Conditions[i] = c
	}
}

// syncStatus is the kubelet's tryUpdateNodeStatus, every liteStatusPeriod:
// the Node from the node informer (from the server on a retry), its status
// computed anew, and a PATCH of the difference only if it changed (not
// counting heartbeat times) or liteStatusReport has passed since the last
// report; the first report after a change, and the first of all, come at a
// random offset of ±half that period, so that nodes spread their reports.
func (n *liteNode) syncStatus(ctx context.Context) {
	var err error
	for try := range liteStatusRetries {
		if err = n.tryUpdateStatus(ctx, try); err == nil || ctx.Err() != nil {
			return
		}
		if try > 0 {
			n.dialer.CloseAll() // the kubelet's onRepeatedHeartbeatFailure, as in start
		}
	}
	klog.FromContext(ctx).Error(err, "Unable to update node status")
}

func (n *liteNode) tryUpdateStatus(ctx context.Context, try int) error {
	var orig *corev1.Node
	if obj, ok, _ := n.nodeStore.GetByKey(n.name); ok && try == 0 {
		orig = obj.(*corev1.Node)
	} else {
		var err error
		if orig, err = n.hb.core.Nodes().Get(ctx, n.name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("getting node %s: %w", n.name, err)
		}
	}
	node := orig.DeepCopy()
	now := time.Now()
	n.setStatus(&node.Status, now)
	changed := statusChanged(&orig.Status, &node.Status)
	if !changed && now.Sub(n.lastReport) < liteStatusReport+n.reportDelay {
		return nil
	}
	if changed || n.lastReport.IsZero() {
		n.reportDelay = time.Duration(float64(liteStatusReport) * (rand.Float64() - 0.5))
	} else {
		n.reportDelay = 0
	}
	if _, _, err := nodeutil.PatchNodeStatus(n.hb.core, types.NodeName(n.name), orig, node); err != nil {
		return err
	}
	n.lastReport = now
	return nil
}

// statusChanged compares two node statuses as the kubelet's
// nodeStatusHasChanged does: conditions by type without their heartbeat
// times, everything else as it is.
func statusChanged(a, b *corev1.NodeStatus) bool {
	if len(a.Conditions) != len(b.Conditions) {
		return true
	}
	for i := range b.Conditions {
		c := b.Conditions[i]
		_, o := nodeutil.GetNodeCondition(a, c.Type)
		if o == nil {
			return true
		}
		oc := *o
		oc.LastHeartbeatTime, c.LastHeartbeatTime = metav1.Time{}, metav1.Time{}
		if !apiequality.Semantic.DeepEqual(oc, c) {
			return true
		}
	}
	ac, bc := *a, *b
	ac.Conditions, bc.Conditions = nil, nil
	return !apiequality.Semantic.DeepEqual(ac, bc)
}
