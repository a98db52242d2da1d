package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// What TestNodePartition uses besides the two-node cluster harness: a third
// node on the cluster's bridge, the partition itself (nftables rules in a
// node's namespace), HTTP from inside a node's namespace, and a node's
// containerd seen through CRI.

// extraAgent is an agent node that joined a twoNodeCluster besides its own.
type extraAgent struct {
	Node, NS, IP, Dir string
	Ctrd              *testcontainerd.Containerd
	Agent             *agentProc
}

// addAgentNode starts one more agent, node name, in a network namespace of
// its own on c's bridge (the host range's address .last), with a
// containerd of its own, and waits until its node is Ready. extra are more
// agent flags.
func addAgentNode(t *testing.T, c *twoNodeCluster, name string, last int, extra ...string) *extraAgent {
	t.Helper()
	prefix := c.HostIP[:strings.LastIndex(c.HostIP, ".")]
	n := prefix[strings.LastIndex(prefix, ".")+1:]
	pid := os.Getpid()
	a := &extraAgent{Node: name, NS: fmt.Sprintf("ep-net-%d-%s-%s", pid, n, name), IP: fmt.Sprintf("%s.%d", prefix, last)}
	host := fmt.Sprintf("epv%d-%s%d", pid%100000, n, last) // at most 15 bytes
	ipCmd(t, "netns", "add", a.NS)
	t.Cleanup(func() { _ = execIP("netns", "del", a.NS) })
	ipCmd(t, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", a.NS)
	t.Cleanup(func() { _ = execIP("link", "del", host) })
	ipCmd(t, "link", "set", host, "master", c.Bridge, "up")
	ipCmd(t, "-n", a.NS, "addr", "add", a.IP+"/24", "dev", "eth0")
	ipCmd(t, "-n", a.NS, "link", "set", "eth0", "up")
	ipCmd(t, "-n", a.NS, "link", "set", "lo", "up")

	// startTwoNodeCluster's order: the kubelet's directories, containerd,
	// then the data dir, so that each is removed after what uses it.
	kubelet := twoNodeOptions{}.kubeletArgs(t, a.NS)
	a.Ctrd = testcontainerd.Start(t, testcontainerd.Options{Netns: a.NS})
	a.Dir = agentDataDir(t)
	clusterImages(t, filepath.Join(a.Dir, "agent", "images"), true)
	args := append([]string{"agent", "--config", "", "--server", "https://" + c.ServerIP + ":6443",
		"--token", serverNodeToken(t, c.Server), "--data-dir", a.Dir,
		"--node-name", name, "--node-ip", a.IP,
		"--container-runtime-endpoint", a.Ctrd.Endpoint, "--cni-conf-dir", a.Ctrd.CNIConfDir,
		"--pause-image", testimage.DefaultPauseName,
	}, kubelet...)
	args = append(args, extra...)
	a.Agent = startAgentOwned(t, c.owner, nsenterCmd(a.NS, args...))
	waitNodeReady(t, c.Server, name)
	return a
}

// partitionTable is the nftables table of the test's own that cuts a node
// off its server.
const partitionTable = "edgeplane-test-partition"

// cutLink drops, in network namespace ns, every packet to and from peer,
// established connections included: the link to peer is down as far as
// the node can tell (nothing is refused, everything times out).
func cutLink(t *testing.T, ns, peer string) {
	t.Helper()
	rules := fmt.Sprintf(`table inet %[1]s {
 chain input {
  type filter hook input priority -10; policy accept;
  ip saddr %[2]s drop
 }
 chain output {
  type filter hook output priority -10; policy accept;
  ip daddr %[2]s drop
 }
}
`, partitionTable, peer)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cut %s off %s (nft): %v: %s", ns, peer, err, out)
	}
}

// restoreLink removes cutLink's rules from ns; it does nothing when there
// are none.
func restoreLink(t *testing.T, ns string) {
	t.Helper()
	if exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "inet", partitionTable).Run() != nil {
		return
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", partitionTable).CombinedOutput(); err != nil {
		t.Fatalf("restore %s's link (nft): %v: %s", ns, err, out)
	}
}

// nsGet fetches url from network namespace ns with the host's busybox
// wget, as a process of the node itself would (bounded by timeout:
// busybox 1.35's wget -T segfaults after a fetch).
func nsGet(ns, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "timeout", "5",
		testimage.DefaultBusyboxPath, "wget", "-q", "-O", "-", url).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("wget %s in %s: %v: %s", url, ns, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// criRuntime is a CRI client of a node's containerd.
type criRuntime struct {
	endpoint string
	conn     *grpc.ClientConn
	rt       runtimeapi.RuntimeServiceClient
}

// dialCRI connects to the containerd at endpoint (unix://...) for t.
func dialCRI(t *testing.T, endpoint string) *criRuntime {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("CRI client of %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &criRuntime{endpoint: endpoint, conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}
}

// podContainer is one running container of a pod, as containerd has it.
type podContainer struct {
	ID string
	// RestartCount is the kubelet's count for it (its
	// io.kubernetes.container.restartCount annotation), which the kubelet
	// reports as the container's restartCount.
	RestartCount string
}

// running lists the running containers of the pod whose UID is uid.
func (c *criRuntime) running(ctx context.Context, uid string) ([]podContainer, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		return nil, fmt.Errorf("list the containers of pod %s in %s: %w", uid, c.endpoint, err)
	}
	var out []podContainer
	for _, ctr := range list.Containers {
		out = append(out, podContainer{ID: ctr.Id, RestartCount: ctr.Annotations["io.kubernetes.container.restartCount"]})
	}
	slices.SortFunc(out, func(a, b podContainer) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// podIP is the address of the ready sandbox of the pod whose UID is uid.
func (c *criRuntime) podIP(ctx context.Context, uid string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	list, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		return "", fmt.Errorf("list the sandboxes of pod %s in %s: %w", uid, c.endpoint, err)
	}
	if len(list.Items) != 1 {
		return "", fmt.Errorf("pod %s has %d ready sandboxes in %s, want 1", uid, len(list.Items), c.endpoint)
	}
	st, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: list.Items[0].Id})
	if err != nil {
		return "", fmt.Errorf("status of sandbox %s in %s: %w", list.Items[0].Id, c.endpoint, err)
	}
	if ip := st.GetStatus().GetNetwork().GetIp(); ip != "" {
		return ip, nil
	}
	return "", fmt.Errorf("sandbox %s of pod %s has no address", list.Items[0].Id, uid)
}

// removeAllPods stops and removes every pod sandbox (and so every
// container) of the containerd, as a reboot leaves a node: no container,
// the images kept. It returns how many sandboxes it removed.
func (c *criRuntime) removeAllPods(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("list the sandboxes in %s: %v", c.endpoint, err)
	}
	for _, sb := range list.Items {
		if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			t.Fatalf("stop sandbox %s (pod %s) in %s: %v", sb.Id, sb.GetMetadata().GetName(), c.endpoint, err)
		}
		if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			t.Fatalf("remove sandbox %s (pod %s) in %s: %v", sb.Id, sb.GetMetadata().GetName(), c.endpoint, err)
		}
	}
	left, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatalf("list the containers in %s: %v", c.endpoint, err)
	}
	if len(left.Containers) != 0 {
		t.Fatalf("%d containers left in %s after removing every sandbox, want none", len(left.Containers), c.endpoint)
	}
	return len(list.Items)
}
