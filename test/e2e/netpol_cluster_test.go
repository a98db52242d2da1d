package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNetworkPolicyAcrossNodes: on the two-node cluster (flannel vxlan and
// kube-proxy on both nodes, and both kubelets with the product's per-QoS
// cgroups), a web pod and a client (np-near) on the server node, and two
// clients on the agent node. Every path to the web pod answers first: by
// pod IP (across the vxlan from the agent's clients, over the bridge from
// np-near), by its ClusterIP from each client, and by its NodePort from
// the host at either node's address. A policy that denies all ingress to
// the web pod closes every one of those paths; a policy that then allows
// ingress from one client on the agent opens its pod-IP and ClusterIP paths
// across the nodes and nothing else: the other clients and the NodePorts
// (whose traffic comes from the host, or from the agent node's own address
// once it is masqueraded there) stay denied.
//
// The ClusterIP of a pod on another node is translated on the client's
// node, so the web pod's node sees the pod IP; np-near's ClusterIP and the
// server node's NodePort are translated on the web pod's own node, where
// the policy must match the translated address.
func TestNetworkPolicyAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two containerds, a server node and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{PerQoSCgroups: true})

	webIP := c.runPod(t, "np-web", c.ServerNode, webScript("np-web"), nil)
	c.runPod(t, "np-client", c.AgentNode, "exec sleep 3600", nil)
	c.runPod(t, "np-other", c.AgentNode, "exec sleep 3600", nil)
	c.runPod(t, "np-near", c.ServerNode, "exec sleep 3600", nil)

	t.Run("pods run in per-QoS cgroups under their node's root", func(t *testing.T) {
		for pod, ns := range map[string]string{"np-web": c.ServerNS, "np-client": c.AgentNS} {
			c.checkQoSCgroup(t, pod, ns)
		}
	})

	if out, err := c.kubectl("expose", "pod", "np-web", "--name=np-web", "--type=NodePort", "--port=80", "--target-port=8080"); err != nil {
		t.Fatalf("kubectl expose: %v\n%s", err, out)
	}
	svcIP := clusterIP(t, c, "np-web")
	port := nodePort(t, c, "np-web")

	type path struct {
		name   string
		client string // a pod, or "" for the host
		url    string
	}
	paths := []path{
		{"np-client to the pod IP (vxlan)", "np-client", "http://" + webIP + ":8080/"},
		{"np-client to the ClusterIP", "np-client", "http://" + svcIP + ":80/"},
		{"np-other to the pod IP (vxlan)", "np-other", "http://" + webIP + ":8080/"},
		{"np-other to the ClusterIP", "np-other", "http://" + svcIP + ":80/"},
		{"np-near to the pod IP (bridge)", "np-near", "http://" + webIP + ":8080/"},
		{"np-near to the ClusterIP (translated on the web pod's node)", "np-near", "http://" + svcIP + ":80/"},
		{"host to the server node's NodePort", "", fmt.Sprintf("http://%s:%d/", c.ServerIP, port)},
		{"host to the agent node's NodePort", "", fmt.Sprintf("http://%s:%d/", c.AgentIP, port)},
	}
	// reachable reports whether p gets the page (true), is dropped (false:
	// no answer within the client's timeout), or fails otherwise (error:
	// a refused connection is no policy's doing).
	reachable := func(p path) (bool, error) {
		if p.client != "" {
			out, err := c.podExec(p.client, "timeout", "3", "wget", "-q", "-O", "-", p.url)
			switch {
			case err == nil && strings.TrimSpace(out) == "np-web":
				return true, nil
			case err != nil && strings.Contains(err.Error(), "exit code 143"): // timeout's give-up
				return false, nil
			default:
				return false, fmt.Errorf("%s: %v: %q", p.name, err, out)
			}
		}
		body, err := hostGet(context.Background(), p.url)
		var ne net.Error
		switch {
		case err == nil && body == "np-web":
			return true, nil
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			return false, nil
		default:
			return false, fmt.Errorf("%s: %v: %q", p.name, err, body)
		}
	}
	// expect waits until every path is as want says (true: answers).
	expect := func(t *testing.T, what string, want map[string]bool) {
		t.Helper()
		for _, p := range paths {
			eventually(t, 90*time.Second, what+": "+p.name, func(context.Context) (bool, error) {
				got, err := reachable(p)
				if err != nil {
					return false, err
				}
				return got == want[p.name], fmt.Errorf("reachable=%v, want %v", got, want[p.name])
			})
		}
	}
	all := func(v bool) map[string]bool {
		m := map[string]bool{}
		for _, p := range paths {
			m[p.name] = v
		}
		return m
	}

	expect(t, "before any policy", all(true))

	deny := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np-web-deny, namespace: default}
spec:
  podSelector: {matchLabels: {app: np-web}}
  policyTypes: [Ingress]
`
	if out, err := c.Server.kubectlStdin(deny, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	expect(t, "ingress denied", all(false))

	allow := `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np-web-from-client, namespace: default}
spec:
  podSelector: {matchLabels: {app: np-web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: np-client}}}]
    ports: [{port: 8080}]
`
	if out, err := c.Server.kubectlStdin(allow, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	want := all(false)
	want["np-client to the pod IP (vxlan)"] = true
	want["np-client to the ClusterIP"] = true
	expect(t, "ingress allowed from np-client only", want)
}

// checkQoSCgroup checks that pod's container runs in the cgroup the
// kubelet's per-QoS layout gives a BestEffort pod under the node's root
// (/<ns>, testCgroupRoot): /<ns>/kubepods/besteffort/pod<UID>/<container>.
// With cgroups-per-qos=false it would be /<ns>/pod<UID>/... or so, and with
// the host's default root /kubepods/...
func (c *twoNodeCluster) checkQoSCgroup(t *testing.T, pod, ns string) {
	t.Helper()
	p, err := c.Server.client.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// cgroup v1 without a cgroup namespace (runc's default there): the
	// container sees its cgroups' paths from the hierarchy's root.
	out, err := c.podExec(pod, "cat", "/proc/1/cgroup")
	if err != nil {
		t.Fatalf("%s: %v", pod, err)
	}
	want := "/" + ns + "/kubepods/besteffort/pod" + string(p.UID) + "/"
	for _, line := range strings.Split(out, "\n") {
		// hierarchy-ID:controllers:path
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "memory" {
			if !strings.HasPrefix(f[2], want) {
				t.Errorf("%s's memory cgroup is %s, want one under %s", pod, f[2], want)
			}
			return
		}
	}
	t.Errorf("%s: no memory cgroup in /proc/1/cgroup:\n%s", pod, out)
}
