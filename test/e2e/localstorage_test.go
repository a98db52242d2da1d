package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// The names k3s users' manifests and the part use (the test does not import
// the package, so that it builds against a binary from before it).
const (
	localPathClass     = "local-path"
	localPathNodeLabel = "edgeplane.io/local-storage-node"
	localPathFinalizer = "edgeplane.io/local-storage"
)

// TestLocalStorage: with no flags, a StatefulSet with a volumeClaimTemplate
// and no storageClassName gets a local-path volume on the server's node and
// on an agent: a file written there is read back by the pod that replaces
// a deleted one. Non-root pods write to their volumes, with fsGroup and
// without. --disable=local-storage removes the class and existing volumes
// keep working; enabled again, it is back. Deleting a claim removes its
// directory. A claim whose node cannot write the storage path, or whose
// disk is full, has an event that says so, and the pod starts once the
// path is writable.
func TestLocalStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two containerds, a server node and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{})
	storage := filepath.Join(c.Server.dataDir, "storage")

	t.Run("default class", func(t *testing.T) {
		out, err := c.kubectl("get", "storageclass", localPathClass, "-o",
			`jsonpath={.provisioner} {.volumeBindingMode} {.reclaimPolicy} {.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}`)
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if want := "edgeplane.io/local-path WaitForFirstConsumer Delete true"; out != want {
			t.Fatalf("StorageClass %s: %q, want %q", localPathClass, out, want)
		}
	})

	nodes := []string{c.ServerNode, c.AgentNode}
	for _, node := range nodes {
		applyStatefulSet(t, c, "db-"+node, node)
	}
	dirs := map[string]string{} // node -> its volume's directory
	t.Run("StatefulSet volumes survive their pods", func(t *testing.T) {
		for _, node := range nodes {
			app := "db-" + node
			pod := runningPods(t, c.Server, app, 1)[0]
			if pod.Spec.NodeName != node {
				t.Fatalf("pod %s runs on %s, want %s", pod.Name, pod.Spec.NodeName, node)
			}
			content := "kept on " + node
			if out, err := c.podExec(pod.Name, "sh", "-c", "echo '"+content+"' > /data/file"); err != nil {
				t.Fatalf("write: %v: %s", err, out)
			}
			pv := claimVolume(t, c, "data-"+app+"-0")
			if pv.Labels[localPathNodeLabel] != node || pv.Spec.Local == nil || filepath.Dir(pv.Spec.Local.Path) != storage {
				t.Fatalf("volume %s: node label %q, source %+v; want node %s, a directory in %s", pv.Name, pv.Labels[localPathNodeLabel], pv.Spec.PersistentVolumeSource, node, storage)
			}
			dirs[node] = pv.Spec.Local.Path
			if got := strings.TrimSpace(readFile(t, filepath.Join(pv.Spec.Local.Path, "file"))); got != content {
				t.Errorf("the file in %s on the host holds %q, want %q", pv.Spec.Local.Path, got, content)
			}
			replacePod(t, c, app, pod)
			readBack(t, c, app, content)
		}
	})

	t.Run("non-root pods write", func(t *testing.T) {
		for _, tt := range []struct {
			name, securityContext, check, want string
		}{
			{"fsgroup", `{"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000}`, "stat -c %g /data/f", "2000"},
			{"nonroot", `{"runAsUser": 1001, "runAsGroup": 1001}`, "stat -c %u /data/f", "1001"},
		} {
			applyClaimPod(t, c, tt.name, c.AgentNode, tt.securityContext)
			pod := runningPods(t, c.Server, tt.name, 1)[0]
			out, err := c.podExec(pod.Name, "sh", "-c", "id && echo ok > /data/f && "+tt.check)
			if err != nil {
				t.Fatalf("%s: write: %v: %s", tt.name, err, out)
			}
			if lines := strings.Fields(out); len(lines) == 0 || lines[len(lines)-1] != tt.want {
				t.Errorf("%s: %q, want the file's owner %s", tt.name, out, tt.want)
			}
		}
	})

	t.Run("--disable=local-storage removes the class, volumes keep working", func(t *testing.T) {
		restartServer(t, c, "--disable=local-storage")
		if out, err := c.kubectl("get", "storageclass", localPathClass); err == nil || !strings.Contains(out, "NotFound") {
			t.Fatalf("the class is still there with --disable=local-storage: %v: %s", err, out)
		}
		app := "db-" + c.ServerNode
		pv := claimVolume(t, c, "data-"+app+"-0")
		if slices.Contains(pv.Finalizers, localPathFinalizer) {
			t.Errorf("volume %s keeps the finalizer %s with local storage off", pv.Name, localPathFinalizer)
		}
		// A new pod on the restarted node mounts the existing volume.
		replacePod(t, c, app, runningPods(t, c.Server, app, 1)[0])
		readBack(t, c, app, "kept on "+c.ServerNode)
		if out, err := c.podExec(runningPods(t, c.Server, "fsgroup", 1)[0].Name, "sh", "-c", "echo again >> /data/f"); err != nil {
			t.Errorf("write with local storage off: %v: %s", err, out)
		}

		restartServer(t, c)
		if _, err := c.Server.client.StorageV1().StorageClasses().Get(context.Background(), localPathClass, metav1.GetOptions{}); err != nil {
			t.Errorf("the class after enabling local storage again: %v", err)
		}
		if pv := claimVolume(t, c, "data-"+app+"-0"); !slices.Contains(pv.Finalizers, localPathFinalizer) {
			t.Errorf("volume %s: finalizers %v after enabling local storage again, want %s", pv.Name, pv.Finalizers, localPathFinalizer)
		}
	})

	t.Run("deleting the claim removes the directory", func(t *testing.T) {
		var claims []string
		for _, node := range nodes {
			if out, err := c.kubectl("delete", "statefulset", "db-"+node, "--wait"); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			claims = append(claims, "data-db-"+node+"-0")
		}
		var volumes []string
		for _, claim := range claims {
			volumes = append(volumes, claimVolume(t, c, claim).Name)
		}
		waitNoPods(t, c, "db-"+c.ServerNode, "db-"+c.AgentNode)
		if out, err := c.kubectl(append([]string{"delete", "pvc", "--wait"}, claims...)...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for i, node := range nodes {
			eventually(t, 2*time.Minute, "the directory on "+node+" removed and volume "+volumes[i]+" gone", func(ctx context.Context) (bool, error) {
				if _, err := os.Stat(dirs[node]); !errors.Is(err, os.ErrNotExist) {
					return false, fmt.Errorf("%s: %v", dirs[node], err)
				}
				_, err := c.Server.client.CoreV1().PersistentVolumes().Get(ctx, volumes[i], metav1.GetOptions{})
				return apierrors.IsNotFound(err), err
			})
		}
	})

	// The storage path is the cluster's and both nodes share this host's
	// disk: a tmpfs over it is what a node would see with a read-only or a
	// full disk. The claims' pods go on the agent.
	t.Run("a path the node cannot write has an event, then works", func(t *testing.T) {
		unmount := mountOver(t, storage, "ro,size=1m")
		applyClaimPod(t, c, "ro", c.AgentNode, `{}`)
		t.Log(waitClaimEvent(t, c, "ro-data", "LocalPathNotWritable", "read-only file system"))
		unmount()
		eventually(t, 4*time.Minute, "the pod running once the path is writable", func(context.Context) (bool, error) {
			pods, err := c.Server.client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=ro"})
			if err != nil || len(pods.Items) != 1 {
				return false, err
			}
			return pods.Items[0].Status.Phase == corev1.PodRunning, fmt.Errorf("pod %s%s", pods.Items[0].Status.Phase, podReason(pods.Items[0]))
		})
	})

	t.Run("a full disk has an event", func(t *testing.T) {
		unmount := mountOver(t, storage, "size=1m")
		fillDisk(t, storage)
		applyClaimPod(t, c, "full", c.AgentNode, `{}`)
		t.Log(waitClaimEvent(t, c, "full-data", "LocalPathDiskFull", "is full (the claim asks for 10Mi)"))
		pod := runningPods(t, c.Server, "full", 1)[0]
		if out, err := c.podExec(pod.Name, "sh", "-c", "echo x > /data/f"); err == nil || !strings.Contains(err.Error(), "No space left on device") {
			t.Errorf("a write to the full disk: %v: %s; want No space left on device", err, out)
		}
		if out, err := c.kubectl("delete", "pod", pod.Name, "--wait"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		volume := claimVolume(t, c, "full-data").Name
		if out, err := c.kubectl("delete", "pvc", "full-data", "--wait"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		eventually(t, 2*time.Minute, "volume "+volume+" gone", func(ctx context.Context) (bool, error) {
			_, err := c.Server.client.CoreV1().PersistentVolumes().Get(ctx, volume, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
		unmount()
	})
}

// applyStatefulSet makes a StatefulSet of one replica on node whose
// volumeClaimTemplate names no class, as charts' do.
func applyStatefulSet(t *testing.T, c *twoNodeCluster, name, node string) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: %[1]s
spec:
  serviceName: %[1]s
  replicas: 1
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[2]s}
      terminationGracePeriodSeconds: 1
      containers:
      - name: db
        image: %[3]s
        command: [sh, -c, "exec sleep 3600"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 10Mi}}
`, name, node, testimage.DefaultBusyboxName)
	if out, err := c.Server.kubectlStdin(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply StatefulSet %s: %v: %s", name, err, out)
	}
}

// applyClaimPod makes the claim <name>-data (no class) and a pod <name>
// on node (by node selector: the scheduler places it, as the class's
// WaitForFirstConsumer needs) with the pod security context given.
func applyClaimPod(t *testing.T, c *twoNodeCluster, name, node, securityContext string) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: %[1]s-data
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Mi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  labels: {app: %[1]s}
spec:
  nodeSelector: {kubernetes.io/hostname: %[2]s}
  terminationGracePeriodSeconds: 1
  securityContext: %[4]s
  containers:
  - name: c
    image: %[3]s
    command: [sh, -c, "exec sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: %[1]s-data}
`, name, node, testimage.DefaultBusyboxName, securityContext)
	if out, err := c.Server.kubectlStdin(manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply %s: %v: %s", name, err, out)
	}
}

// claimVolume waits until claim is bound and returns its volume.
func claimVolume(t *testing.T, c *twoNodeCluster, claim string) *corev1.PersistentVolume {
	t.Helper()
	var pv *corev1.PersistentVolume
	eventually(t, 2*time.Minute, "claim "+claim+" bound", func(ctx context.Context) (bool, error) {
		pvc, err := c.Server.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pvc.Status.Phase != corev1.ClaimBound {
			return false, fmt.Errorf("claim %s", pvc.Status.Phase)
		}
		pv, err = c.Server.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, err
	})
	return pv
}

// replacePod deletes pod and waits for its StatefulSet's new one.
func replacePod(t *testing.T, c *twoNodeCluster, app string, pod corev1.Pod) {
	t.Helper()
	if out, err := c.kubectl("delete", "pod", pod.Name, "--wait"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// --wait: the old pod is gone, any running one is new.
	if got := runningPods(t, c.Server, app, 1)[0]; got.UID == pod.UID {
		t.Fatalf("pod %s is still the old one", got.Name)
	}
}

// readBack waits until the running pod of app reads want from its volume.
func readBack(t *testing.T, c *twoNodeCluster, app, want string) {
	t.Helper()
	pod := runningPods(t, c.Server, app, 1)[0]
	eventually(t, time.Minute, pod.Name+" reads the file back", func(context.Context) (bool, error) {
		out, err := c.podExec(pod.Name, "cat", "/data/file")
		return strings.TrimSpace(out) == want, fmt.Errorf("%v: %q", err, out)
	})
}

// waitNoPods waits until no pod of the apps is left.
func waitNoPods(t *testing.T, c *twoNodeCluster, apps ...string) {
	t.Helper()
	eventually(t, 2*time.Minute, "the pods of "+strings.Join(apps, ", ")+" gone", func(ctx context.Context) (bool, error) {
		pods, err := c.Server.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app in (" + strings.Join(apps, ",") + ")"})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods", len(pods.Items))
	})
}

// waitClaimEvent waits for an event of reason on the claim whose message
// holds want, and returns the message.
func waitClaimEvent(t *testing.T, c *twoNodeCluster, claim, reason, want string) string {
	t.Helper()
	var msg string
	eventually(t, 2*time.Minute, "event "+reason+" on claim "+claim, func(ctx context.Context) (bool, error) {
		evs, err := c.Server.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", claim).String(),
		})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, want) {
				msg = e.Message
				return true, nil
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Errorf("events: %v", seen)
	})
	return msg
}

// restartServer stops the cluster's server and starts it again with its
// flags and extra. The new server, and its kubeconfig, belong to the
// cluster's test (as c.startAgent's agent), not to the subtest that
// restarts it: the subtests after it use them.
func restartServer(t *testing.T, c *twoNodeCluster, extra ...string) {
	t.Helper()
	c.Server.stop()
	args := append(slices.Clone(c.serverArgs), extra...)
	s := waitReady(t, launchCmd(c.owner, c.Server.dataDir, nsenterCmd(c.ServerNS, args...)))
	s.useAddress(c.owner, "https://"+c.ServerIP+":6443")
	s.mustKeepRunning(c.owner)
	c.Server = s
	waitNodeReady(t, c.Server, c.ServerNode)
}

// mountOver mounts a tmpfs with options over dir; the function returned
// (and the test's end) unmounts it.
func mountOver(t *testing.T, dir, options string) func() {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", options, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs over %s: %v: %s", dir, err, out)
	}
	mounted := true
	unmount := func() {
		if mounted {
			mounted = false
			if err := syscall.Unmount(dir, 0); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	}
	t.Cleanup(unmount)
	return unmount
}

// fillDisk writes into dir until its filesystem is full.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// preLocalStorageCommit is main's last commit before local storage: its
// clusters have no StorageClass, and a claim with no class stays Pending.
const preLocalStorageCommit = "9930670"

// TestLocalStorageUpgrade: a cluster made by the binary from before local
// storage gets it at its next start with this binary, without its user's
// objects being touched: the class appears, default; the user's own
// StorageClass and ConfigMap keep their resourceVersion; the claim that was
// Pending for want of a class (the volume controller gives it the new
// default) is bound, on the agent, and its pod writes.
func TestLocalStorageUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an older edgeplane, runs containerd, a server node and an agent")
	}
	var old string
	parallelNode(t, buildClusterImages(t), func() { old = buildAt(t, preLocalStorageCommit) })
	c := startTwoNodeCluster(t, twoNodeOptions{Bin: old})
	s := c.Server
	user := `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: manual}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: edge}
`
	if out, err := s.kubectlStdin(user, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	applyClaimPod(t, c, "app", c.AgentNode, `{"runAsUser": 1000, "fsGroup": 2000}`)
	ctx := context.Background()
	pvc, err := s.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, "app-data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.StorageClassName != nil || pvc.Status.Phase != corev1.ClaimPending {
		t.Fatalf("before the upgrade the claim has class %v and is %s: want none, Pending (a cluster from before local storage)", pvc.Spec.StorageClassName, pvc.Status.Phase)
	}
	if _, err := s.client.StorageV1().StorageClasses().Get(ctx, localPathClass, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the binary of %s has a %s class (%v): not a cluster from before local storage", preLocalStorageCommit, localPathClass, err)
	}
	sc, err := s.client.StorageV1().StorageClasses().Get(ctx, "manual", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The upgrade: the server, then the agent, on this binary.
	restartServer(t, c)
	c.restartAgent(t)
	waitNodeReady(t, c.Server, c.AgentNode)
	s = c.Server

	out, err := c.kubectl("get", "storageclass", localPathClass, "-o", `jsonpath={.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}`)
	if err != nil || out != "true" {
		t.Fatalf("after the upgrade the class %s is default %q (%v), want true", localPathClass, out, err)
	}
	if got, err := s.client.StorageV1().StorageClasses().Get(ctx, "manual", metav1.GetOptions{}); err != nil || got.ResourceVersion != sc.ResourceVersion {
		t.Errorf("the user's StorageClass was touched: %v", err)
	}
	if got, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "settings", metav1.GetOptions{}); err != nil || got.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the user's ConfigMap was touched: %v", err)
	}
	pv := claimVolume(t, c, "app-data")
	if pv.Labels[localPathNodeLabel] != c.AgentNode {
		t.Errorf("volume %s is on node %q, want %s", pv.Name, pv.Labels[localPathNodeLabel], c.AgentNode)
	}
	pod := runningPods(t, s, "app", 1)[0]
	if out, err := c.podExec(pod.Name, "sh", "-c", "echo upgraded > /data/f && cat /data/f"); err != nil || strings.TrimSpace(out) != "upgraded" {
		t.Fatalf("write after the upgrade: %v: %q", err, out)
	}
}
