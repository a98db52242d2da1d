package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	statusutil "k8s.io/kubernetes/pkg/util/pod"
	"k8s.io/utils/ptr"
)

// podTracker is a lite node's pods: the store its pod reflector fills (as
// the kubelet's pod source, spec.nodeName=<node>) and the work that the
// kubelet's pod workers and status manager would do for them: report a new
// pod Running, and a deleted one terminated, then delete it for good.
// It keeps a few fields per pod, not the pods.
type podTracker struct {
	n    *liteNode
	mu   sync.Mutex
	pods map[string]*litePod // by namespace/name
	wake chan struct{}
	ips  uint32 // pod IPs handed out
}

// litePod is what a node remembers of one of its pods.
type litePod struct {
	ns, name string
	uid      types.UID
	deleting bool // it has a deletionTimestamp
	running  bool // its status on the server is Running (ours or seen)
	terminal bool // its status on the server is Succeeded or Failed
	done     bool // deleted by the node (or gone)
	busy     bool // the worker is at it
	failures int
	retryAt  time.Time
}

func (p *litePod) needsWork(now time.Time) bool {
	if p.done || p.busy || now.Before(p.retryAt) {
		return false
	}
	return p.deleting || (!p.running && !p.terminal)
}

func (t *podTracker) upsert(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	p := t.pods[key]
	if p == nil || p.uid != pod.UID {
		p = &litePod{ns: pod.Namespace, name: pod.Name, uid: pod.UID}
		t.pods[key] = p
	}
	p.deleting = pod.DeletionTimestamp != nil
	p.running = pod.Status.Phase == corev1.PodRunning
	p.terminal = pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if p.needsWork(time.Now()) {
		t.poke()
	}
}

func (t *podTracker) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// The cache.ReflectorStore the pod reflector writes to.

func (t *podTracker) Add(obj any) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upsert(obj)
	return nil
}

func (t *podTracker) Update(obj any) error { return t.Add(obj) }

func (t *podTracker) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.pods[pod.Namespace+"/"+pod.Name]; p != nil && p.uid == pod.UID && !p.busy {
		delete(t.pods, pod.Namespace+"/"+pod.Name)
	}
	return nil
}

func (t *podTracker) Replace(list []any, _ string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.pods
	t.pods = make(map[string]*litePod, len(list))
	for _, obj := range list {
		if pod, ok := obj.(*corev1.Pod); ok {
			if p := old[pod.Namespace+"/"+pod.Name]; p != nil && p.uid == pod.UID {
				t.pods[pod.Namespace+"/"+pod.Name] = p
			}
		}
		t.upsert(obj)
	}
	return nil
}

func (t *podTracker) Resync() error { return nil }

// run works on the pods until ctx ends: when the reflector pokes it, and
// again when a failed request is due for a retry.
func (t *podTracker) run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-retry.C:
		}
		if next := t.work(ctx); next.IsZero() {
			retry.Reset(time.Hour)
		} else {
			retry.Reset(max(time.Until(next), 100*time.Millisecond))
		}
	}
}

// work does what the pods need, one at a time, and returns when the
// earliest retry is due (zero: none).
func (t *podTracker) work(ctx context.Context) time.Time {
	now := time.Now()
	var todo []*litePod
	t.mu.Lock()
	for _, p := range t.pods {
		if p.needsWork(now) {
			p.busy = true
			todo = append(todo, p)
		}
	}
	t.mu.Unlock()
	for _, p := range todo {
		var err error
		if p.deleting {
			err = t.finish(ctx, p)
		} else {
			err = t.start(ctx, p)
		}
		t.mu.Lock()
		p.busy = false
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Pod status", "pod", p.ns+"/"+p.name, "err", err.Error())
			p.failures++
			p.retryAt = time.Now().Add(min(time.Duration(p.failures)*time.Second, 10*time.Second))
		} else {
			p.failures = 0
		}
		t.mu.Unlock()
	}
	var next time.Time
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.pods {
		if !p.done && !p.retryAt.IsZero() && (p.deleting || !p.running) && (next.IsZero() || p.retryAt.Before(next)) {
			next = p.retryAt
		}
	}
	return next
}

// start reports a new pod Running as the status manager's syncPod does: a
// GET of the pod, then a PATCH of its status with the UID as a precondition.
func (t *podTracker) start(ctx context.Context, p *litePod) error {
	pod, err := t.n.core.Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && pod.UID != p.uid) {
		t.forget(p)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodPending {
		return nil // the watch brings the change
	}
	_, _, _, err = statusutil.PatchPodStatus(ctx, &nodeClientset{core: t.n.core}, p.ns, p.name, p.uid, pod.Status, t.runningStatus(pod, time.Now()))
	if err == nil {
		t.mu.Lock()
		p.running = true
		t.mu.Unlock()
	}
	return err
}

// finish ends a deleted pod as the kubelet does once its containers are
// gone: its status terminal, then the final delete (grace period 0, the UID
// as a precondition).
func (t *podTracker) finish(ctx context.Context, p *litePod) error {
	pod, err := t.n.core.Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && pod.UID != p.uid) {
		t.forget(p)
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		if _, _, _, err := statusutil.PatchPodStatus(ctx, &nodeClientset{core: t.n.core}, p.ns, p.name, p.uid, pod.Status, terminatedStatus(pod, time.Now())); err != nil {
			return err
		}
	}
	err = t.n.core.Pods(p.ns).Delete(ctx, p.name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(p.uid)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	t.forget(p)
	return nil
}

func (t *podTracker) forget(p *litePod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.done = true
	if cur := t.pods[p.ns+"/"+p.name]; cur == p {
		delete(t.pods, p.ns+"/"+p.name)
	}
}

// podIP is the next address of the node's podCIDR (as the node IPAM
// controller assigned it), or, when it has none, of a /24 of its own in
// 100.64.0.0/10 (16384 of them, by node index).
func (t *podTracker) podIP() string {
	t.mu.Lock()
	k := t.ips
	t.ips++
	t.mu.Unlock()
	v, size := uint32(100)<<24|uint32(64)<<16+uint32(t.n.index%(1<<14))<<8, uint32(256)
	if obj, ok, _ := t.n.nodeStore.GetByKey(t.n.name); ok {
		if pfx, err := netip.ParsePrefix(obj.(*corev1.Node).Spec.PodCIDR); err == nil && pfx.Addr().Is4() && pfx.Bits() <= 29 {
			a := pfx.Masked().Addr().As4()
			v, size = uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]), uint32(1)<<(32-pfx.Bits())
		}
	}
	v += 2 + k%(size-3)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// setPodCondition sets a condition of s, keeping its transition time if its
// status is unchanged.
func setPodCondition(s *corev1.PodStatus, c corev1.PodCondition) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == c.Type {
			if s.Conditions[i].Status == c.Status {
				c.LastTransitionTime = s.Conditions[i].LastTransitionTime
			}
			s.Conditions[i] = c
			return
		}
	}
	s.Conditions = append(s.Conditions, c)
}

// runningStatus is the status the kubelet reports for a pod whose
// containers all started: phase Running, its conditions true, addresses,
// start time, and every container running and ready.
func (t *podTracker) runningStatus(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	s := pod.Status.DeepCopy()
	at := metav1.NewTime(now)
	s.Phase = corev1.PodRunning
	s.ObservedGeneration = pod.Generation
	s.HostIP, s.HostIPs = t.n.ip.String(), []corev1.HostIP{{IP: t.n.ip.String()}}
	ip := t.podIP()
	s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if s.StartTime == nil {
		s.StartTime = &at
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(s, corev1.PodCondition{Type: ct, Status: corev1.ConditionTrue, LastTransitionTime: at, ObservedGeneration: pod.Generation})
	}
	s.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		s.InitContainerStatuses = append(s.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod.UID, c.Name),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Completed", StartedAt: at, FinishedAt: at, ContainerID: containerID(pod.UID, c.Name)}},
			Started: ptr.To(false),
		})
	}
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod.UID, c.Name),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}},
			Ready: true, Started: ptr.To(true),
		})
	}
	return *s
}

// terminatedStatus is the status of a pod whose containers the kubelet
// stopped for its deletion: Succeeded, each container exited 0.
func terminatedStatus(pod *corev1.Pod, now time.Time) corev1.PodStatus {
	s := pod.Status.DeepCopy()
	at := metav1.NewTime(now)
	s.Phase = corev1.PodSucceeded
	s.ObservedGeneration = pod.Generation
	for _, ct := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.ContainersReady, corev1.PodReady} {
		setPodCondition(s, corev1.PodCondition{Type: ct, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: at, ObservedGeneration: pod.Generation})
	}
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		started := at
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: at, ContainerID: cs.ContainerID}}
		cs.Ready, cs.Started = false, ptr.To(false)
	}
	return *s
}

func containerID(uid types.UID, name string) string {
	sum := sha256.Sum256([]byte(string(uid) + "/" + name))
	return "lite://" + hex.EncodeToString(sum[:])
}

func imageID(image string) string {
	sum := sha256.Sum256([]byte(image))
	return image + "@sha256:" + hex.EncodeToString(sum[:])
}
