package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/internal/testing/testregistry"
	"github.com/edgeplane/edgeplane/pkg/airgap"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/pauseimage"
)

// TestManagedRuntime: a server and an agent given no runtime flags (no
// --container-runtime-endpoint, no --pause-image), with Debian's
// containerd on the PATH, each run a containerd of their own under their
// data dir, become Ready and run pods, with no sandbox image in the airgap
// folder and no registry (the pause image inside edgeplane). On that
// cluster:
//   - a registries.yaml mirror of docker.io on a registry of the test's,
//     with basic auth: `kubectl run --image=docker.io/library/...` is
//     pulled through it;
//   - SIGKILL to the agent's containerd: it is restarted, the pod's
//     container keeps running (same container id and process), the node
//     stays Ready;
//   - stopping and starting the agent (with a wrong password in
//     registries.yaml, read at start) and the server keeps the pods'
//     containers (same ids and processes, one sandbox each), and a pull
//     with the wrong password gets an event that says unauthorized.
//
// The test host's quirks (no negative oom_score_adj) are in each node's
// config.toml.tmpl (managedRuntime).
func TestManagedRuntime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server node and an agent node with their own containerds in network namespaces")
	}
	_, err := exec.LookPath("containerd")
	testenv.Require(t, "containerd on the PATH (apt-get install containerd runc)", err)
	parallelNode(t, buildClusterImages(t))
	begin := time.Now()

	// The registry of docker.io/library/hello:1.0 and :2.0 (busybox), on
	// the host's bridge address, behind basic auth.
	const user, password = "edge", "right"
	var registries, registryAddr string
	writeRegistries := func(t *testing.T, password string) {
		t.Helper()
		yaml := fmt.Sprintf("mirrors:\n  docker.io:\n    endpoint: [\"http://%s\"]\nconfigs:\n  %q:\n    auth: {username: %s, password: %q}\n",
			registryAddr, registryAddr, user, password)
		if err := os.WriteFile(registries, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := startTwoNodeCluster(t, twoNodeOptions{ManagedRuntime: true, RegistriesFile: func(t *testing.T, hostIP string) string {
		images := t.TempDir()
		for _, name := range []string{"docker.io/library/hello:1.0", "docker.io/library/hello:2.0"} {
			img := testimage.Busybox()
			img.Name = name
			if _, err := testimage.Write(images, img); err != nil {
				t.Fatal(err)
			}
		}
		reg, err := testregistry.New(images)
		if err != nil {
			t.Fatal(err)
		}
		reg.Username, reg.Password = user, password
		l, err := reg.Serve(hostIP + ":0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		registryAddr = l.Addr().String()
		registries = filepath.Join(t.TempDir(), "registries.yaml")
		writeRegistries(t, password)
		return registries
	}})
	t.Logf("cluster of two nodes with managed containerds Ready after %s", time.Since(begin).Round(time.Second))
	serverCtd, agentCtd := filepath.Join(c.ServerDir, "agent", "containerd"), filepath.Join(c.AgentDir, "agent", "containerd")

	// The pods this test follows: one on each node, each a sleep with an
	// argument of its own, so that its process is found on the host.
	type kept struct {
		pod, node, ctd string
		container      string
		pid            int
	}
	keep := []*kept{{pod: "keep-agt", node: c.AgentNode, ctd: agentCtd}, {pod: "keep-srv", node: c.ServerNode, ctd: serverCtd}}
	for i, k := range keep {
		c.runPod(t, k.pod, k.node, "exec sleep "+strconv.Itoa(86400+i), nil)
	}
	// checkKept: each kept pod still runs the container it ran first, with
	// the same process, in its one sandbox, as its node's containerd and
	// the API tell.
	checkKept := func(t *testing.T) {
		t.Helper()
		for i, k := range keep {
			id, restarts := containerOf(t, c, k.pod)
			pid := sleepPID(t, 86400+i)
			if k.container == "" {
				k.container, k.pid = id, pid
				continue
			}
			if running := runningContainers(t, k.ctd, k.pod); len(running) != 1 || "containerd://"+running[0] != k.container {
				t.Errorf("pod %s: %s's containerd runs containers %v; it ran %s", k.pod, k.node, running, k.container)
			}
			if id != k.container || restarts != 0 || pid != k.pid {
				t.Errorf("pod %s runs container %s (restarts %d, process %d); it ran %s (process %d)", k.pod, id, restarts, pid, k.container, k.pid)
			}
			if n := sandboxes(t, k.ctd, k.pod); n != 1 {
				t.Errorf("pod %s has %d sandboxes in %s's containerd, want 1", k.pod, n, k.node)
			}
		}
	}
	// restarted waits until node's new edgeplane has its containerd
	// answering and its kubelet has reported the node (a heartbeat after
	// since) and runs commands in the node's kept pods: it has seen the
	// pods, and made them anew if it was going to.
	restarted := func(t *testing.T, node string, since time.Time) {
		t.Helper()
		since = since.Truncate(time.Second) // the API's times are in seconds
		eventually(t, 2*time.Minute, node+"'s kubelet reporting again", func(ctx context.Context) (bool, error) {
			r := nodeReady(t, c, node)
			return r.Status == corev1.ConditionTrue && !r.LastHeartbeatTime.Time.Before(since),
				fmt.Errorf("Ready %s, last heartbeat %s", r.Status, r.LastHeartbeatTime)
		})
		for _, k := range keep {
			if k.node != node {
				continue
			}
			eventually(t, time.Minute, "kubectl exec in "+k.pod, func(context.Context) (bool, error) {
				out, err := c.podExec(k.pod, "echo", "alive")
				return err == nil && strings.TrimSpace(out) == "alive", err
			})
		}
	}
	checkKept(t)

	t.Run("embedded pause image", func(t *testing.T) {
		for _, dir := range []string{c.ServerDir, c.AgentDir} {
			if _, err := os.Stat(filepath.Join(dir, "agent", "images", testimage.FileName(testimage.DefaultPauseName))); err == nil {
				t.Errorf("a pause image in %s's airgap folder", dir)
			}
			cfg, err := os.ReadFile(filepath.Join(dir, "agent", "containerd", containerd.ConfigFile))
			if err != nil {
				t.Fatal(err)
			}
			if want := "sandbox_image = " + strconv.Quote(pauseimage.Name); !strings.Contains(string(cfg), want) {
				t.Errorf("the managed containerd's config.toml in %s lacks %s:\n%s", dir, want, cfg)
			}
		}
	})

	t.Run("pull through the registries.yaml mirror", func(t *testing.T) {
		runImage(t, c, "mirror", "docker.io/library/hello:1.0")
		runningPods(t, c.Server, "mirror", 1)
	})

	t.Run("containerd killed", func(t *testing.T) {
		old := managedPID(t, agentCtd)
		node := nodeReady(t, c, c.AgentNode)
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILL to the agent's containerd (pid %d)", old)
		eventually(t, time.Minute, "a new containerd answering on "+agentCtd, func(ctx context.Context) (bool, error) {
			b, err := os.ReadFile(filepath.Join(agentCtd, containerd.PIDFile))
			if err != nil {
				return false, err
			}
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid == old || pid == 0 {
				return false, fmt.Errorf("containerd.pid names %s", b)
			}
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err = airgap.WaitReady(callCtx, filepath.Join(agentCtd, containerd.SocketFile))
			return err == nil, err
		})
		if !strings.Contains(c.Agent.output.String(), "Restarted containerd") {
			t.Errorf("the agent's log does not say it restarted containerd")
		}
		// The kubelet sees the runtime again: a command runs in the pod
		// (kubectl exec goes through containerd's stream server).
		eventually(t, time.Minute, "kubectl exec in keep-agt", func(context.Context) (bool, error) {
			out, err := c.podExec("keep-agt", "echo", "alive")
			return err == nil && strings.TrimSpace(out) == "alive", err
		})
		checkKept(t)
		// The node stays Ready: its kubelet ran 10 s with the new
		// containerd (a lease renewal after that; the kubelet checks the
		// runtime every 5 s and reports a change of Ready at once) and its
		// Ready condition did not change.
		since := time.Now().Add(10 * time.Second)
		eventually(t, time.Minute, c.AgentNode+"'s lease renewed 10 s after the restart", func(ctx context.Context) (bool, error) {
			l, err := c.Server.client.CoordinationV1().Leases("kube-node-lease").Get(ctx, c.AgentNode, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if l.Spec.RenewTime == nil {
				return false, errors.New("no renew time")
			}
			return l.Spec.RenewTime.After(since), fmt.Errorf("renewed at %s", l.Spec.RenewTime)
		})
		now := nodeReady(t, c, c.AgentNode)
		if now.LastTransitionTime != node.LastTransitionTime || now.Status != corev1.ConditionTrue {
			t.Errorf("%s Ready %s since %s (%s); it was Ready since %s", c.AgentNode, now.Status, now.LastTransitionTime, now.Message, node.LastTransitionTime)
		}
	})

	t.Run("agent stopped and started", func(t *testing.T) {
		// registries.yaml is read at start: the new agent's containerd
		// has the wrong password.
		writeRegistries(t, "wrong")
		c.Agent.stop(t)
		since := time.Now()
		c.Agent = c.startAgent(t)
		restarted(t, c.AgentNode, since)
		checkKept(t)
		t.Run("wrong password", func(t *testing.T) {
			runImage(t, c, "unauthorized", "docker.io/library/hello:2.0")
			msg := waitClaimEvent(t, c, "unauthorized", "Failed", "401 Unauthorized")
			t.Logf("event: %s", msg)
		})
	})

	t.Run("server stopped and started", func(t *testing.T) {
		since := time.Now()
		restartServer(t, c)
		restarted(t, c.ServerNode, since)
		checkKept(t)
	})
	t.Logf("TestManagedRuntime took %s", time.Since(begin).Round(time.Second))
}

// managedRuntime prepares a node of dataDir to run its managed containerd
// in network namespace ns, and returns its runtime flags: only its own
// CNI configuration directory (two nodes on one host) and registriesFile.
// This host's quirks are in the managed containerd's user template: these
// test machines refuse a negative oom_score_adj, which the kubelet asks
// for pod sandboxes (-998), so the CRI plugin restricts it to containerd's
// own (restrict_oom_score_adj). The containerd, its shims and its pods
// are removed when t ends.
func managedRuntime(t *testing.T, dataDir, ns, registriesFile string) []string {
	t.Helper()
	dir := filepath.Join(dataDir, "agent", "containerd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	const at = "  enable_selinux = false\n"
	base := containerd.BaseTemplate()
	if !strings.Contains(base, at) {
		t.Fatalf("the generated containerd configuration has no %q line to add restrict_oom_score_adj after:\n%s", at, base)
	}
	tmpl := strings.Replace(base, at, at+"  restrict_oom_score_adj = true\n", 1)
	if err := os.WriteFile(filepath.Join(dir, containerd.TemplateFile), []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeManaged(t, dir, ns) })
	return []string{"--cni-conf-dir", t.TempDir(), "--registries-file", registriesFile}
}

// removeManaged removes what the managed containerd in dir leaves once its
// edgeplane is gone: it waits for that containerd to end, starts it again
// over the same root and state to remove the pods through CRI (their
// network too), stops it, then kills its shims left and unmounts.
func removeManaged(t *testing.T, dir, ns string) {
	config := filepath.Join(dir, containerd.ConfigFile)
	if _, err := os.Stat(config); err != nil {
		return // never started
	}
	socket := filepath.Join(dir, containerd.SocketFile)
	if b, err := os.ReadFile(filepath.Join(dir, containerd.PIDFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			waitProcessGone(t, pid, config)
		}
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Errorf("remove the managed containerd's pods: %v", err)
		return
	}
	var out syncBuffer
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", bin, "--config", config)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	started := cmd.Start() == nil
	exited := make(chan struct{})
	if started {
		go func() { _ = cmd.Wait(); close(exited) }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := airgap.WaitReady(ctx, socket); err != nil {
			t.Logf("the managed containerd of %s started again for its cleanup does not answer: %v\n%s", dir, err, out.String())
		}
		cancel()
	}
	testcontainerd.Teardown(socket, filepath.Join(dir, containerd.RootDir), filepath.Join(dir, containerd.StateDir), func() {
		if !started {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}, t.Logf)
}

// waitProcessGone waits until process pid (a containerd running config)
// has ended, SIGKILLing it after 20 s.
func waitProcessGone(t *testing.T, pid int, config string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), config) {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("containerd %d still runs 20 s after its edgeplane ended: killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// managedPID is the pid of the managed containerd in dir (containerd.pid).
func managedPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, containerd.PIDFile))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", filepath.Join(dir, containerd.PIDFile), err)
	}
	return pid
}

// nodeReady is node's Ready condition.
func nodeReady(t *testing.T, c *twoNodeCluster, node string) corev1.NodeCondition {
	t.Helper()
	n, err := c.Server.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond
		}
	}
	t.Fatalf("node %s has no Ready condition", node)
	return corev1.NodeCondition{}
}

// containerOf is the container id and restart count of pod's one
// container.
func containerOf(t *testing.T, c *twoNodeCluster, pod string) (string, int32) {
	t.Helper()
	p, err := c.Server.client.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("pod %s: container statuses %+v, want one running", pod, p.Status.ContainerStatuses)
	}
	cs := p.Status.ContainerStatuses[0]
	return cs.ContainerID, cs.RestartCount
}

// sleepPID is the host pid of the one process `sleep arg`.
func sleepPID(t *testing.T, arg int) int {
	t.Helper()
	want := "sleep\x00" + strconv.Itoa(arg) + "\x00"
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && string(cmdline) == want {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("processes `sleep %d`: %v, want one", arg, found)
	}
	return found[0]
}

// sandboxes counts pod's sandboxes in the managed containerd of dir.
func sandboxes(t *testing.T, dir, pod string) int {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, containerd.SocketFile), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": pod}},
	})
	if err != nil {
		t.Fatalf("list the sandboxes of %s in %s: %v", pod, dir, err)
	}
	return len(list.Items)
}

// runningContainers are the ids of pod's running containers in the
// managed containerd of dir.
func runningContainers(t *testing.T, dir, pod string) []string {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, containerd.SocketFile), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := runtimeapi.NewRuntimeServiceClient(conn).ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: map[string]string{"io.kubernetes.pod.name": pod},
		},
	})
	if err != nil {
		t.Fatalf("list the containers of %s in %s: %v", pod, dir, err)
	}
	var ids []string
	for _, ctr := range list.Containers {
		ids = append(ids, ctr.Id)
	}
	return ids
}

// runImage is `kubectl run name --image=image` on the agent, a pod that
// sleeps, labelled app=name.
func runImage(t *testing.T, c *twoNodeCluster, name, image string) {
	t.Helper()
	overrides := fmt.Sprintf(`{"apiVersion":"v1","spec":{"nodeName":%q}}`, c.AgentNode)
	if out, err := c.kubectl("run", name, "--image="+image, "--restart=Never", "--labels=app="+name,
		"--overrides="+overrides, "--command", "--", "sleep", "3600"); err != nil {
		t.Fatalf("kubectl run %s: %v\n%s", name, err, out)
	}
}
