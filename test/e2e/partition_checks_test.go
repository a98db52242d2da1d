package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNodePartition's last step and the checks its steps share.

// corruptCache: with the agent stopped, every data file of A's api-cache
// directory is overwritten with garbage; the agent starts (the server
// answers), says once that it discarded the cache, never serves it (the
// garbage leaves the disk, and the node's pod keeps its containers), and
// its node is Ready.
func (p *partition) corruptCache(t *testing.T) {
	c := p.c
	dir := filepath.Join(c.AgentDir, "agent", "api-cache")
	c.Agent.stop(t)
	garbage := []byte("\x00\xffnot a cache entry: edgeplane TestNodePartition garbage\x1f\x8b\x08")
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		// The cache's data, not the certificate its clients trust it
		// with (made again at each start).
		if err != nil || !d.Type().IsRegular() || strings.HasSuffix(path, ".crt") {
			return err
		}
		files = append(files, path)
		return os.WriteFile(path, garbage, 0o600)
	})
	if err != nil {
		t.Fatalf("make the cache in %s garbage: %v", dir, err)
	}
	if len(files) == 0 {
		t.Fatalf("no file in %s: the agent kept no API cache (want the node's objects kept there)", dir)
	}
	t.Logf("%d cache files made garbage: %v", len(files), files)

	since := time.Now()
	c.Agent = c.startAgent(t)
	waitAgentReady(t, c.Agent)
	eventually(t, 2*time.Minute, c.AgentNode+"'s kubelet reporting Ready again", func(ctx context.Context) (bool, error) {
		r := nodeReady(t, c, c.AgentNode)
		return r.Status == corev1.ConditionTrue && !r.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)),
			fmt.Errorf("Ready %s, last heartbeat %s", r.Status, r.LastHeartbeatTime)
	})
	eventually(t, time.Minute, "the garbage gone from "+dir, func(context.Context) (bool, error) {
		var left []string
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, garbage) {
				left = append(left, path)
			}
			return nil
		})
		return err == nil && len(left) == 0, fmt.Errorf("garbage still in %v (%v)", left, err)
	})
	// One line says the cache is discarded, naming the cache (its
	// directory, or "API cache").
	discarded := regexp.MustCompile(`(?i)discard`)
	names := regexp.MustCompile(`(?i)api-cache|api cache`)
	var lines []string
	for _, l := range strings.Split(c.Agent.output.String(), "\n") {
		if discarded.MatchString(l) && names.MatchString(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Errorf("A's agent logged %d lines about discarding its corrupt api-cache, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	want := p.containers[p.kept]
	p.recordContainers(t, "after the restart on a corrupt cache", p.kept)
	if !slices.Equal(p.containers[p.kept], want) {
		t.Errorf("pod %s runs containers %v after the restart on a corrupt cache; before it, %v", p.kept, p.containers[p.kept], want)
	}
	p.serviceServes(t, time.Minute, greetingV2)
}

// recordContainers records the running container of each of uids (all of
// web-a's pods when none is given) in A's containerd, waiting until each
// runs exactly one.
func (p *partition) recordContainers(t *testing.T, when string, uids ...types.UID) {
	t.Helper()
	if len(uids) == 0 {
		uids = p.uids
	}
	next := map[types.UID][]podContainer{}
	eventually(t, time.Minute, "one running container for each of web-a's pods in A's containerd "+when, func(ctx context.Context) (bool, error) {
		for _, uid := range uids {
			running, err := p.cri.running(ctx, string(uid))
			if err != nil {
				return false, err
			}
			if len(running) != 1 {
				return false, fmt.Errorf("pod %s runs %v", uid, running)
			}
			next[uid] = running
		}
		return true, nil
	})
	for uid, cs := range next {
		p.containers[uid] = cs
	}
}

// serviceServes waits until web-a's ClusterIP, fetched inside A, gives
// the greeting want and the Secret's value.
func (p *partition) serviceServes(t *testing.T, timeout time.Duration, want string) {
	t.Helper()
	defer func() { // t.Fatalf ends the goroutine through deferred calls
		if t.Failed() {
			t.Logf("web-a's Service as the server and node A see it:\n%s", p.serviceState())
		}
	}()
	for path, want := range map[string]string{"/cm/greeting": want, "/secret/password": secretValue} {
		url := "http://" + p.svcIP + path
		eventually(t, timeout, "web-a's Service serving "+path+" inside A", func(context.Context) (bool, error) {
			got, err := nsGet(p.c.AgentNS, url)
			if err != nil {
				return false, err
			}
			return got == want, fmt.Errorf("%s gives %q, want %q", url, got, want)
		})
	}
}

// serviceState is what a failure to reach web-a's Service is looked into
// with: the server's EndpointSlices and pods of web-a, the addresses of
// web-a's pods in A's containerd, and kube-proxy's rules for it in A.
func (p *partition) serviceState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	eps, err := p.c.Server.client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + webApp})
	if err != nil {
		fmt.Fprintf(&b, "EndpointSlices: %v\n", err)
	} else {
		for _, sl := range eps.Items {
			fmt.Fprintf(&b, "EndpointSlice %s (resourceVersion %s):", sl.Name, sl.ResourceVersion)
			for _, ep := range sl.Endpoints {
				ready := ep.Conditions.Ready != nil && *ep.Conditions.Ready
				fmt.Fprintf(&b, " %v ready=%t", ep.Addresses, ready)
			}
			b.WriteString("\n")
		}
	}
	if pods, err := appPods(ctx, p.c, webApp); err != nil {
		fmt.Fprintf(&b, "pods: %v\n", err)
	} else {
		for _, pod := range pods {
			fmt.Fprintf(&b, "pod %s (%s) IP %s, terminating %t\n", pod.Name, pod.UID, pod.Status.PodIP, pod.DeletionTimestamp != nil)
		}
	}
	for _, uid := range p.uids {
		ip, err := p.cri.podIP(ctx, string(uid))
		fmt.Fprintf(&b, "A's containerd: pod %s at %q (%v)\n", uid, ip, err)
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", p.c.AgentNS, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		fmt.Fprintf(&b, "nft list ruleset in A: %v: %s\n", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, webApp) || strings.Contains(l, p.svcIP) {
			b.WriteString("nft:" + l + "\n")
		}
	}
	return b.String()
}

// notKept returns an error unless pods (web-a's on the server) are exactly
// uids, bound to A, not terminating and without a disruption condition.
func (p *partition) notKept(pods []corev1.Pod, uids []types.UID) error {
	var got []types.UID
	for _, pod := range pods {
		got = append(got, pod.UID)
		if pod.DeletionTimestamp != nil || pod.Spec.NodeName != p.c.AgentNode || hasCondition(pod, corev1.DisruptionTarget, "") {
			return fmt.Errorf("pod %s of the autonomous node: deleted %v, node %q, conditions %+v; want kept on %s",
				pod.Name, pod.DeletionTimestamp, pod.Spec.NodeName, pod.Status.Conditions, p.c.AgentNode)
		}
	}
	slices.Sort(got)
	want := slices.Clone(uids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("pods of %s on the server: %s, want exactly %v", webApp, describePods(pods), want)
	}
	return nil
}

// waitUnreachable waits until node is NotReady (Unknown) and tainted
// unreachable NoExecute, and returns when the taint was added.
func (p *partition) waitUnreachable(t *testing.T, node string) time.Time {
	t.Helper()
	var added time.Time
	eventually(t, 2*time.Minute, node+" NotReady and tainted "+corev1.TaintNodeUnreachable, func(ctx context.Context) (bool, error) {
		n, err := p.c.Server.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeUnreachable && taint.Effect == corev1.TaintEffectNoExecute && taint.TimeAdded != nil {
				added = taint.TimeAdded.Time
				return true, nil
			}
		}
		return false, fmt.Errorf("taints %+v", n.Spec.Taints)
	})
	return added
}

// What the node's API cache (its logger api-cache) logs when no server
// answers and when one does again; the node's other parts' errors say
// "no API server answers" too, in the cache's answers to their requests.
var (
	cacheLogger  = regexp.MustCompile(`logger="[^"]*api-cache"`)
	cacheOffline = regexp.MustCompile(`(?i)"no API server answers`)
	cacheOnline  = regexp.MustCompile(`(?i)"an API server answers again`)
)

// cacheLines are the lines of an agent's output that the API cache logged
// and that match what.
func cacheLines(output string, what *regexp.Regexp) []string {
	var lines []string
	for _, l := range strings.Split(output, "\n") {
		if cacheLogger.MatchString(l) && what.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

// head keeps the first n lines of a log but the kubelet's flag
// deprecation warnings.
func head(log string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if len(out) == n {
			out = append(out, "...")
			break
		}
		if !strings.HasPrefix(l, "Flag --") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// appPods lists the pods labelled app=<app>.
func appPods(ctx context.Context, c *twoNodeCluster, app string) ([]corev1.Pod, error) {
	list, err := c.Server.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// describePods is a line about pods for a failure message.
func describePods(pods []corev1.Pod) string {
	var out []string
	for _, pod := range pods {
		s := fmt.Sprintf("%s (%s, node %q, %s", pod.Name, pod.UID, pod.Spec.NodeName, pod.Status.Phase)
		if pod.DeletionTimestamp != nil {
			s += ", terminating"
		}
		out = append(out, s+")")
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// hasCondition reports whether pod has condition typ true, with reason
// (any reason when empty).
func hasCondition(pod corev1.Pod, typ corev1.PodConditionType, reason string) bool {
	return slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == typ && c.Status == corev1.ConditionTrue && (reason == "" || c.Reason == reason)
	})
}
