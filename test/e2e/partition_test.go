package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/controllers"
)

// The partition's timings. Upstream evicts a node's pods 300 s after it is
// tainted unreachable (the API server's DefaultTolerationSeconds admission
// gives every pod that toleration) and taints it 50 s after its last Lease
// renewal. edgeplane has no flag for the API server's
// --default-unreachable-toleration-seconds, so the test's pods carry their
// own tolerations (which that admission then leaves alone); the grace
// period follows the server's --node-heartbeat (nodeconfig: five missed
// renewals).
const (
	// partitionHeartbeat is the server's --node-heartbeat: nodes renew
	// their Lease every 2 s and are NotReady after 10 s without one (the
	// node lifecycle controller looks every 5 s).
	partitionHeartbeat = "2s"
	// partitionToleration is the pods' tolerationSeconds of the
	// unreachable and not-ready NoExecute taints: a node's pods are evicted
	// 30-45 s after its link is cut (tainted 10-25 s after it: the node
	// lifecycle controller taints one node every 10 s at most).
	partitionToleration = 20 * time.Second
	// partitionMargin is how long past its toleration the autonomous
	// node's pods must still be there.
	partitionMargin = 15 * time.Second
)

// The test's workloads (partitionManifest).
const (
	webApp, otherApp = "web-a", "web-b"
	greetingV1       = "hello from the server, version 1"
	greetingV2       = "hello from the server, version 2"
	secretValue      = "s3cret-of-the-partition"
)

// TestNodePartition is issue 46's partition test. A server that is its own
// node (it stays Ready: the node lifecycle controller stops every eviction
// when all nodes are NotReady, "master disruption mode", so a cluster of
// only partitioned nodes would show nothing) and two agents, each in a
// network namespace of its own with its own containerd: A labelled
// edgeplane.io/autonomous=true at join, B not. A runs a Deployment of two
// busybox httpd pods serving their ConfigMap and Secret volumes (service
// account token mounted, as by default) behind a Service; B runs one pod.
//
//  1. Both agents' links to the server are cut (nftables drops, both
//     directions) for longer than the eviction timeout: B's pod is evicted
//     after its toleration and replaced on the server (upstream's
//     behaviour); A's pods are not deleted, not replaced, keep their
//     containers, and the Service answers inside A with the ConfigMap.
//  2. Still cut off: A's agent is killed (a power cut), every sandbox and
//     container of its containerd removed (images kept), and the agent
//     started again: its pods run again from the node's own state (same
//     UIDs, new containers) with their volumes, and the Service answers.
//  3. Meanwhile the ConfigMap is edited and the Deployment scaled to one.
//  4. The link returns: A is Ready, the pod kept is not restarted, the
//     other is gone, and the edited ConfigMap is served.
//  5. A cache file made garbage while the agent is stopped is discarded
//     with one log line and never served; the agent starts.
//
// Step 1 needs only the autonomy label (pkg/controllers); steps 2, 4 and 5
// test the node's API cache (pkg/apicache) and the agent's offline start
// from its kept cluster settings. It takes about 3 minutes on a quiet
// 2-core machine.
func TestNodePartition(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three containerds, a server node and two agent nodes in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	begin := time.Now()
	c := startTwoNodeCluster(t, twoNodeOptions{
		ServerArgs: []string{"--node-heartbeat", partitionHeartbeat, "--disable=coredns"},
		AgentArgs:  []string{"--node-label", controllers.AutonomousLabel + "=true"},
		// The Service is fetched by its ClusterIP from A's namespace itself.
		RouteServiceCIDR: true,
	})
	const nodeB = "agt-b"
	b := addAgentNode(t, c, nodeB, 4)
	for node, want := range map[string]string{c.AgentNode: "true", nodeB: ""} {
		n, err := c.Server.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels[controllers.AutonomousLabel]; got != want {
			t.Fatalf("node %s is labelled %s=%q, want %q", node, controllers.AutonomousLabel, got, want)
		}
	}
	t.Logf("server node %s, autonomous agent %s (%s), agent %s (%s): Ready after %s",
		c.ServerNode, c.AgentNode, c.AgentIP, nodeB, b.IP, time.Since(begin).Round(time.Second))

	p := &partition{c: c, b: b, cri: dialCRI(t, c.AgentCtrd.Endpoint), containers: map[types.UID][]podContainer{}}
	if !t.Run("workloads", p.workloads) ||
		!t.Run("partition: the autonomous node keeps its pods, the other node's pod is evicted", p.cut) ||
		!t.Run("offline reboot: the node runs its pods again from its own state", p.reboot) ||
		!t.Run("changes on the server during the partition", p.serverChanges) ||
		!t.Run("link restored: changes applied, unchanged pod not restarted", p.restore) {
		return
	}
	t.Run("corrupt cache discarded", p.corruptCache)
	t.Logf("TestNodePartition took %s", time.Since(begin).Round(time.Second))
}

// partition is TestNodePartition's cluster and what its steps hand on.
type partition struct {
	c   *twoNodeCluster
	b   *extraAgent
	cri *criRuntime // A's containerd

	svcIP string
	// uids are web-a's two pods; containers their running containers in
	// A's containerd, as last recorded.
	uids       []types.UID
	containers map[types.UID][]podContainer
	// otherUID is B's pod.
	otherUID types.UID
	// deleted and kept are web-a's pod the scale-down deleted and the
	// other.
	deleted, kept types.UID
}

// partitionManifest: web-a (two httpd pods on A serving /cm/greeting and
// /secret/password from their ConfigMap and Secret volumes, its Service on
// port 80) and web-b (one pod on B). Both tolerate the partition taints
// partitionToleration.
func partitionManifest(nodeA, nodeB string) string {
	tolerations := fmt.Sprintf(`
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: %[1]d}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: %[1]d}`,
		int(partitionToleration.Seconds()))
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: %[1]s}
data: {greeting: %[5]q}
---
apiVersion: v1
kind: Secret
metadata: {name: %[1]s}
stringData: {password: %[6]q}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  replicas: 2
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[3]s}
      terminationGracePeriodSeconds: 2%[7]s
      containers:
      - name: web
        image: %[8]s
        imagePullPolicy: IfNotPresent
        command: [httpd, -f, -p, "8080", -h, /www]
        readinessProbe: {httpGet: {path: /cm/greeting, port: 8080}, periodSeconds: 2}
        volumeMounts:
        - {name: cm, mountPath: /www/cm, readOnly: true}
        - {name: secret, mountPath: /www/secret, readOnly: true}
      volumes:
      - {name: cm, configMap: {name: %[1]s}}
      - {name: secret, secret: {secretName: %[1]s}}
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s}
spec:
  selector: {app: %[1]s}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[4]s}
      terminationGracePeriodSeconds: 2%[7]s
      containers:
      - name: sleep
        image: %[8]s
        imagePullPolicy: IfNotPresent
        command: [sleep, "3600"]
`, webApp, otherApp, nodeA, nodeB, greetingV1, secretValue, tolerations, testimage.DefaultBusyboxName)
}

// workloads starts web-a and web-b, records web-a's pods and containers
// and checks that the Service answers inside A.
func (p *partition) workloads(t *testing.T) {
	c := p.c
	if out, err := c.Server.kubectlStdin(partitionManifest(c.AgentNode, p.b.Node), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the workloads: %v: %s", err, out)
	}
	for _, pod := range runningPods(t, c.Server, webApp, 2) {
		if pod.Spec.NodeName != c.AgentNode {
			t.Fatalf("pod %s on node %q, want %q", pod.Name, pod.Spec.NodeName, c.AgentNode)
		}
		if pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken {
			t.Fatalf("pod %s does not mount its service account token", pod.Name)
		}
		p.uids = append(p.uids, pod.UID)
	}
	other := runningPods(t, c.Server, otherApp, 1)[0]
	if other.Spec.NodeName != p.b.Node {
		t.Fatalf("pod %s on node %q, want %q", other.Name, other.Spec.NodeName, p.b.Node)
	}
	p.otherUID = other.UID
	p.svcIP = clusterIP(t, c, webApp)
	p.recordContainers(t, "before the partition")
	p.serviceServes(t, time.Minute, greetingV1)
}

// cut partitions both agents and checks eviction: B's pod after its
// toleration, A's pods never.
func (p *partition) cut(t *testing.T) {
	c := p.c
	cut := time.Now()
	cutLink(t, c.AgentNS, c.ServerIP)
	cutLink(t, p.b.NS, c.ServerIP)
	if err := dialFrom(c.AgentNS, c.ServerIP+":6443"); err == nil {
		t.Fatalf("A's namespace still opens connections to the server: the drop rules do not hold")
	}

	taintedA := p.waitUnreachable(t, c.AgentNode)
	t.Logf("%s NotReady and tainted unreachable %s after the cut", c.AgentNode, taintedA.Sub(cut).Round(time.Second))
	taintedB := p.waitUnreachable(t, p.b.Node)

	// B: upstream's eviction, once the toleration has run out.
	var evicted *corev1.Pod
	eventually(t, 2*time.Minute, "B's pod evicted (deleted on the server)", func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, otherApp)
		if err != nil {
			return false, err
		}
		for _, pod := range pods {
			if pod.UID == p.otherUID && pod.DeletionTimestamp != nil {
				evicted = &pod
				return true, nil
			}
		}
		return false, fmt.Errorf("pods of %s: %s", otherApp, describePods(pods))
	})
	// DeletionTimestamp is the deletion's time plus the pod's grace period.
	deletedAt := evicted.DeletionTimestamp.Time.Add(-time.Duration(*evicted.DeletionGracePeriodSeconds) * time.Second)
	if earliest := taintedB.Add(partitionToleration - time.Second); deletedAt.Before(earliest) {
		t.Errorf("B's pod deleted at %s, before its toleration ran out (tainted %s + %s)", deletedAt, taintedB, partitionToleration)
	}
	if !hasCondition(*evicted, corev1.DisruptionTarget, "DeletionByTaintManager") {
		t.Errorf("B's pod %s has no DisruptionTarget condition by DeletionByTaintManager: %+v", evicted.Name, evicted.Status.Conditions)
	}
	t.Logf("B's pod evicted %s after the cut (%s after its node was tainted)", deletedAt.Sub(cut).Round(time.Second), deletedAt.Sub(taintedB).Round(time.Second))
	eventually(t, time.Minute, "a replacement of B's pod on the server", func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, otherApp)
		if err != nil {
			return false, err
		}
		for _, pod := range pods {
			if pod.UID != p.otherUID && pod.DeletionTimestamp == nil {
				return true, nil
			}
		}
		return false, fmt.Errorf("pods of %s: %s, want one more than %s", otherApp, describePods(pods), p.otherUID)
	})

	// A: the same toleration has run out, with a margin, and its pods are
	// the same objects, bound to A, not terminating, not replaced.
	until := taintedA.Add(partitionToleration + partitionMargin)
	eventually(t, until.Sub(time.Now())+time.Minute, fmt.Sprintf("A's pods kept %s past their toleration", partitionMargin), func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, webApp)
		if err != nil {
			return false, err
		}
		if err := p.notKept(pods, p.uids); err != nil {
			t.Fatalf("%s after the cut: %v", time.Since(cut).Round(time.Second), err)
		}
		return time.Now().After(until), fmt.Errorf("A's pods still kept, waiting until %s", until.Format(time.TimeOnly))
	})
	t.Logf("A's pods kept on the server %s after the cut (%s after A was tainted)", time.Since(cut).Round(time.Second), time.Since(taintedA).Round(time.Second))
	if r := nodeReady(t, c, c.AgentNode); r.Status == corev1.ConditionTrue {
		t.Errorf("%s Ready during the partition (%s), want NotReady/Unknown", c.AgentNode, r.Message)
	}

	if lines := cacheLines(c.Agent.output.String(), cacheOffline); len(lines) != 1 {
		t.Errorf("A's agent logged %d lines of its API cache going offline during the partition, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	// Their containers still run, the same ones, and the Service answers
	// inside A with the ConfigMap and the Secret.
	before := maps.Clone(p.containers)
	p.recordContainers(t, "during the partition")
	for _, uid := range p.uids {
		if !slices.Equal(p.containers[uid], before[uid]) {
			t.Errorf("pod %s runs containers %v in A's containerd during the partition; before it, %v", uid, p.containers[uid], before[uid])
		}
	}
	p.serviceServes(t, 30*time.Second, greetingV1)
}

// reboot kills A's agent, removes every container of A's containerd and
// starts the agent again while the link is still cut.
func (p *partition) reboot(t *testing.T) {
	c := p.c
	c.Agent.kill()
	removed := p.cri.removeAllPods(t)
	t.Logf("A's agent killed and its containerd emptied (%d sandboxes removed), the link still cut", removed)
	start := time.Now()
	c.Agent = c.startAgent(t)
	agent := c.Agent
	t.Cleanup(func() {
		if t.Failed() { // the harness logs the output's end; its start says how the parts started
			t.Logf("the restarted agent's output, first lines:\n%s", head(agent.output.String(), 80))
		}
	})
	eventually(t, 3*time.Minute, "A's pods running again in its containerd", func(ctx context.Context) (bool, error) {
		select {
		case <-agent.exited:
			t.Fatalf("A's agent started with no server answering exited after %s (%v), want it to start from its kept state:\n%s",
				time.Since(start).Round(time.Second), agent.err, tail(agent.output.String()))
		default:
		}
		var waiting []string
		for _, uid := range p.uids {
			running, err := p.cri.running(ctx, string(uid))
			if err != nil {
				return false, err
			}
			if len(running) != 1 {
				waiting = append(waiting, fmt.Sprintf("pod %s runs %d containers", uid, len(running)))
			}
		}
		return len(waiting) == 0, fmt.Errorf("%s", strings.Join(waiting, "; "))
	})
	t.Logf("figure: offline restart, agent start to all %d pods Running: %s", len(p.uids), time.Since(start).Round(100*time.Millisecond))
	before := maps.Clone(p.containers)
	p.recordContainers(t, "after the offline restart")
	for _, uid := range p.uids {
		if slices.Equal(p.containers[uid], before[uid]) {
			t.Errorf("pod %s runs the containers it ran before the reboot (%v): they were removed", uid, before[uid])
		}
	}

	// Each pod serves its volumes, and the Service answers, inside A.
	for _, uid := range p.uids {
		var ip string
		eventually(t, 30*time.Second, "the address of pod "+string(uid), func(ctx context.Context) (bool, error) {
			var err error
			ip, err = p.cri.podIP(ctx, string(uid))
			return err == nil, err
		})
		for path, want := range map[string]string{"/cm/greeting": greetingV1, "/secret/password": secretValue} {
			url := "http://" + ip + ":8080" + path
			eventually(t, 30*time.Second, "pod "+string(uid)+" serving "+path, func(context.Context) (bool, error) {
				got, err := nsGet(c.AgentNS, url)
				if err != nil {
					return false, err
				}
				return got == want, fmt.Errorf("%s gives %q, want %q", url, got, want)
			})
		}
	}
	p.serviceServes(t, time.Minute, greetingV1)
	if lines := cacheLines(agent.output.String(), cacheOffline); len(lines) != 1 {
		t.Errorf("A's agent, started offline, logged %d lines of its API cache going offline, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

// serverChanges edits the ConfigMap and scales web-a to one pod on the
// server, while A is still cut off.
func (p *partition) serverChanges(t *testing.T) {
	c := p.c
	ctx := context.Background()
	cm, err := c.Server.client.CoreV1().ConfigMaps("default").Get(ctx, webApp, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = greetingV2
	if _, err := c.Server.client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("edit ConfigMap %s: %v", webApp, err)
	}
	if out, err := c.kubectl("scale", "deployment/"+webApp, "--replicas=1"); err != nil {
		t.Fatalf("kubectl scale deployment/%s --replicas=1: %v: %s", webApp, err, out)
	}
	eventually(t, time.Minute, "one of web-a's pods deleted by the scale-down", func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, webApp)
		if err != nil {
			return false, err
		}
		var deleted, kept []types.UID
		for _, pod := range pods {
			if !slices.Contains(p.uids, pod.UID) {
				return false, fmt.Errorf("a new pod %s (%s) of %s while A is cut off", pod.Name, pod.UID, webApp)
			}
			if pod.DeletionTimestamp != nil {
				deleted = append(deleted, pod.UID)
			} else {
				kept = append(kept, pod.UID)
			}
		}
		if len(deleted) != 1 || len(kept) != 1 {
			return false, fmt.Errorf("pods of %s: %s, want one of %v terminating", webApp, describePods(pods), p.uids)
		}
		p.deleted, p.kept = deleted[0], kept[0]
		return true, nil
	})
	t.Logf("scale-down: pod %s to go, pod %s kept", p.deleted, p.kept)
}

// restore brings both links back and checks that A applies what changed
// without restarting the pod that did not.
func (p *partition) restore(t *testing.T) {
	c := p.c
	restoreLink(t, c.AgentNS)
	restoreLink(t, p.b.NS)
	back := time.Now()
	waitNodeReady(t, c.Server, c.AgentNode)
	t.Logf("%s Ready %s after the link returned", c.AgentNode, time.Since(back).Round(time.Second))
	if lines := cacheLines(c.Agent.output.String(), cacheOnline); len(lines) != 1 {
		t.Errorf("A's agent logged %d lines of a server answering its API cache again, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}

	eventually(t, 2*time.Minute, "the scaled-down pod gone from the server and from A's containerd", func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, webApp)
		if err != nil {
			return false, err
		}
		if len(pods) != 1 || pods[0].UID != p.kept {
			return false, fmt.Errorf("pods of %s: %s, want only %s", webApp, describePods(pods), p.kept)
		}
		running, err := p.cri.running(ctx, string(p.deleted))
		if err != nil {
			return false, err
		}
		return len(running) == 0, fmt.Errorf("the deleted pod %s still runs %v in A's containerd", p.deleted, running)
	})
	t.Logf("scale-down applied %s after the link returned", time.Since(back).Round(time.Second))
	p.serviceServes(t, 3*time.Minute, greetingV2)
	t.Logf("ConfigMap edit served through the Service %s after the link returned", time.Since(back).Round(time.Second))

	// The pod kept is the same object, running the containers it ran
	// since the offline restart, and the server says so.
	want := p.containers[p.kept]
	p.recordContainers(t, "after the link returned", p.kept)
	if !slices.Equal(p.containers[p.kept], want) {
		t.Errorf("pod %s runs containers %v after the link returned; after the offline restart it ran %v", p.kept, p.containers[p.kept], want)
	}
	pods, err := appPods(context.Background(), c, webApp)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.notKept(pods, []types.UID{p.kept}); err != nil {
		t.Error(err)
	}
	wantID, wantRestarts := "containerd://"+want[0].ID, want[0].RestartCount
	eventually(t, time.Minute, "the server's status of pod "+string(p.kept)+" naming its container", func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, webApp)
		if err != nil || len(pods) != 1 {
			return false, err
		}
		st := pods[0].Status.ContainerStatuses
		if len(st) != 1 {
			return false, fmt.Errorf("container statuses %+v", st)
		}
		got := strconv.Itoa(int(st[0].RestartCount))
		return st[0].ContainerID == wantID && got == wantRestarts,
			fmt.Errorf("container %s restartCount %s, want %s restartCount %s", st[0].ContainerID, got, wantID, wantRestarts)
	})

	// B: its evicted pod stops, its replacement runs there.
	eventually(t, 2*time.Minute, "B's replacement pod running and the evicted one gone", func(ctx context.Context) (bool, error) {
		pods, err := appPods(ctx, c, otherApp)
		if err != nil {
			return false, err
		}
		ok := len(pods) == 1 && pods[0].UID != p.otherUID && pods[0].Status.Phase == corev1.PodRunning && pods[0].Spec.NodeName == p.b.Node
		return ok, fmt.Errorf("pods of %s: %s", otherApp, describePods(pods))
	})
}
