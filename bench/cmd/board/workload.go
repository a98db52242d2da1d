package main

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// The workload: webReplicas pods of a Deployment, one Job pod and one pod
// with a local-path volume: workloadPods in all.
const (
	workloadNS   = "board"
	webReplicas  = 28
	workloadPods = webReplicas + 2
)

// podTimes records, per pod of the workload's namespace, when the watch
// first saw it and when it first saw it Running (or Succeeded: the Job's
// pod may finish between two events), for pod create -> Running.
type podTimes struct {
	mu      sync.Mutex
	created map[types.UID]time.Time
	running map[types.UID]time.Duration
}

func watchPods(ctx context.Context, cs kubernetes.Interface) (*podTimes, error) {
	p := &podTimes{created: map[types.UID]time.Time{}, running: map[types.UID]time.Duration{}}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", workloadNS, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	see := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		p.mu.Lock()
		defer p.mu.Unlock()
		first, ok := p.created[pod.UID]
		if !ok {
			p.created[pod.UID] = now
			first = now
		}
		if _, done := p.running[pod.UID]; !done && (pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded) {
			p.running[pod.UID] = now.Sub(first)
		}
	}
	if err := watchAll(ctx, inf, see, "pods"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *podTimes) latencies() latencies {
	p.mu.Lock()
	defer p.mu.Unlock()
	var l latencies
	for _, d := range p.running {
		l.ok = append(l.ok, d)
	}
	return l
}

// notReadyWatch counts the times a Node that had been Ready is seen not
// Ready: a watch sees every status write, so a short NotReady cleared by
// the next heartbeat is counted too.
type notReadyWatch struct {
	mu       sync.Mutex
	ready    map[string]bool
	episodes int
}

func watchNotReady(ctx context.Context, cs kubernetes.Interface) (*notReadyWatch, error) {
	w := &notReadyWatch{ready: map[string]bool{}}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	see := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		ready := false
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		was, seen := w.ready[n.Name]
		if seen && was && !ready {
			w.episodes++
		}
		w.ready[n.Name] = ready
	}
	if err := watchAll(ctx, inf, see, "Nodes"); err != nil {
		return nil, err
	}
	return w, nil
}

// watchAll calls see with every object inf lists and every update it
// watches, and returns once inf has listed (within a minute) or with ctx.
func watchAll(ctx context.Context, inf cache.SharedIndexInformer, see func(any), what string) error {
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watching %s: not listed within a minute", what)
	}
	return nil
}

func (w *notReadyWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.episodes
}

// probes are the API requests timed while the workload runs: GET one
// object, LIST every pod, create one object; and `kubectl get pods -A`.
type probes struct {
	mu                      sync.Mutex
	get, list, create, kctl latencies
}

// runProbes asks the API once per second (and kubectl every kubectlEvery)
// until ctx ends.
func (b *board) runProbes(ctx context.Context, p *probes, kubectlEvery time.Duration) {
	cs := b.client
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			t := time.Now()
			_, err := cs.CoreV1().ConfigMaps(workloadNS).Get(rctx, "probe", metav1.GetOptions{})
			dGet := time.Since(t)
			t = time.Now()
			_, lerr := cs.CoreV1().Pods("").List(rctx, metav1.ListOptions{})
			dList := time.Since(t)
			t = time.Now()
			cm, cerr := cs.CoreV1().ConfigMaps(workloadNS).Create(rctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			dCreate := time.Since(t)
			if cerr == nil {
				_ = cs.CoreV1().ConfigMaps(workloadNS).Delete(rctx, cm.Name, metav1.DeleteOptions{})
			}
			cancel()
			if ctx.Err() != nil {
				return // cut short by the end of the phase, not the server
			}
			p.mu.Lock()
			p.get.add(dGet, err)
			p.list.add(dList, lerr)
			p.create.add(dCreate, cerr)
			p.mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(kubectlEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			kctx, cancel := context.WithTimeout(ctx, time.Minute)
			t := time.Now()
			err := exec.CommandContext(kctx, "kubectl", "--kubeconfig", b.kubeconfig, "get", "pods", "-A").Run()
			d := time.Since(t)
			cancel()
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.kctl.add(d, err)
			p.mu.Unlock()
		}
	}()
	wg.Wait()
}

// createWorkload makes the namespace, the probe ConfigMap, the claim and
// its pod, the Job and the Deployment.
func (b *board) createWorkload(ctx context.Context) error {
	cs := b.client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	// The namespace's default ServiceAccount comes from a controller; a
	// pod created before it is refused.
	if err := b.waitFor(ctx, 2*time.Minute, "the default ServiceAccount", func(ctx context.Context) error {
		_, err := cs.CoreV1().ServiceAccounts(workloadNS).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().ConfigMaps(workloadNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	img := testimage.DefaultBusyboxName
	pull := corev1.PullNever
	if _, err := cs.CoreV1().PersistentVolumeClaims(workloadNS).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Pods(workloadNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "with-volume"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: pull,
				Command:      []string{"sh", "-c", "echo written > /data/f && exec sleep 2147483647"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.BatchV1().Jobs(workloadNS).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "once"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: img, ImagePullPolicy: pull,
				Command: []string{"sh", "-c", "echo job done"}}},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	_, err := cs.AppsV1().Deployments(workloadNS).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](webReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "httpd", Image: img, ImagePullPolicy: pull,
						Command: []string{"httpd", "-f", "-p", "8080", "-h", "/var/www"},
						Ports:   []corev1.ContainerPort{{ContainerPort: 8080}}}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			},
		},
	}, metav1.CreateOptions{})
	return err
}

// workloadUp: the Deployment's replicas all available and up to date, the
// volume's pod Running, the Job complete.
func (b *board) workloadUp(ctx context.Context) error {
	cs := b.client
	d, err := cs.AppsV1().Deployments(workloadNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return err
	}
	s := d.Status
	if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != webReplicas || s.AvailableReplicas != webReplicas || s.Replicas != webReplicas {
		return fmt.Errorf("deployment web: %d replicas, %d updated, %d available (generation %d observed %d)",
			s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, d.Generation, s.ObservedGeneration)
	}
	p, err := cs.CoreV1().Pods(workloadNS).Get(ctx, "with-volume", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("pod with-volume is %s", p.Status.Phase)
	}
	j, err := cs.BatchV1().Jobs(workloadNS).Get(ctx, "once", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if j.Status.Succeeded < 1 {
		return fmt.Errorf("job once: %d succeeded, %d failed", j.Status.Succeeded, j.Status.Failed)
	}
	return nil
}

// rollingUpdate changes the Deployment's pod template: every replica is
// replaced (25% surge and unavailability, the defaults).
func (b *board) rollingUpdate(ctx context.Context) error {
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"board/rollout":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	_, err := b.client.AppsV1().Deployments(workloadNS).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// nodeAndDNSReady: the node Ready and a CoreDNS pod Ready (the add-ons up).
func (b *board) nodeAndDNSReady(ctx context.Context) error {
	n, err := b.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s not Ready", nodeName)
	}
	pods, err := b.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
	}
	return fmt.Errorf("no Ready CoreDNS pod (%d pods)", len(pods.Items))
}

// apiOOMKilled counts the containers of every pod whose last or current
// termination the kubelet reports as OOMKilled.
func (b *board) apiOOMKilled(ctx context.Context) (int, error) {
	pods, err := b.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			for _, t := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
				if t != nil && t.Reason == "OOMKilled" {
					n++
				}
			}
		}
	}
	return n, nil
}
