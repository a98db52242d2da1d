package testcontainerd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"k8s.io/apimachinery/pkg/util/wait"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2/ktesting"
)

// TestRunPod runs, through CRI on the private containerd, a pod sandbox
// (the test pause image) and a busybox container (the test busybox image)
// that prints lines and serves HTTP, on the host network and on a bridge
// network made by the CNI plugins, then stops and removes both. containerd
// gives every sandbox oom_score_adj -998, which these machines refuse: the
// sandbox runs only through the harness's runc wrapper.
func TestRunPod(t *testing.T) {
	tests := []struct {
		name        string
		hostNetwork bool
	}{
		{name: "host network", hostNetwork: true},
		{name: "bridge network", hostNetwork: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var subnet *net.IPNet
			var bridge string
			if !tt.hostNetwork {
				// Registered before Start, so it runs after containerd stopped.
				subnet, bridge = randomNetwork(t)
				t.Cleanup(func() { _ = exec.Command("ip", "link", "del", bridge).Run() })
			}
			ctd := testcontainerd.Start(t, testcontainerd.Options{Images: true})
			rt, img := criClients(ctx, t, ctd.Endpoint)

			for _, name := range []string{ctd.PauseImage, ctd.BusyboxImage} {
				st, err := img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
				if err != nil || st.GetImage() == nil {
					t.Fatalf("CRI ImageStatus(%s) = %v, %v; want the imported image", name, st, err)
				}
			}

			if !tt.hostNetwork {
				writeConflist(t, ctd.CNIConfDir, bridge, subnet)
				err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
					st, err := rt.Status(ctx, false)
					if err != nil {
						return false, err
					}
					for _, c := range st.GetStatus().GetConditions() {
						if c.Type == runtimeapi.NetworkReady {
							return c.Status, nil
						}
					}
					return false, nil
				})
				if err != nil {
					t.Fatalf("CRI network not ready after writing the conflist: %v\n%s", err, ctd.Log())
				}
			}

			logDir := t.TempDir()
			netMode := runtimeapi.NamespaceMode_POD
			if tt.hostNetwork {
				netMode = runtimeapi.NamespaceMode_NODE
			}
			sandboxConfig := &runtimeapi.PodSandboxConfig{
				Metadata:     &runtimeapi.PodSandboxMetadata{Name: "hello", Namespace: "default", Uid: randomHex(t, 8)},
				LogDirectory: logDir,
				Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
					NamespaceOptions: &runtimeapi.NamespaceOption{Network: netMode, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
				}},
			}
			if !tt.hostNetwork {
				// As the kubelet: a pod on the host network keeps the host's name.
				sandboxConfig.Hostname = "hello"
			}
			podID, err := rt.RunPodSandbox(ctx, sandboxConfig, "")
			if err != nil {
				t.Fatalf("RunPodSandbox: %v\ncontainerd log:\n%s", err, ctd.Log())
			}
			pod, err := rt.PodSandboxStatus(ctx, podID, false)
			if err != nil {
				t.Fatal(err)
			}
			if pod.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Fatalf("pod sandbox state %v, want SANDBOX_READY", pod.GetStatus().GetState())
			}
			podIP := pod.GetStatus().GetNetwork().GetIp()
			if !tt.hostNetwork && (net.ParseIP(podIP) == nil || !subnet.Contains(net.ParseIP(podIP))) {
				t.Fatalf("pod IP %q is not in the CNI range %s", podIP, subnet)
			}

			script := `trap "exit 0" TERM; echo "hello from $(hostname)"; ip -o addr show lo; ` +
				`httpd -f -p 8080 -h /var/www & sleep 3600 & wait`
			cid, err := rt.CreateContainer(ctx, podID, &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "hello"},
				Image:    &runtimeapi.ImageSpec{Image: ctd.BusyboxImage},
				Command:  []string{"/bin/sh", "-c", script},
				LogPath:  "hello.log",
			}, sandboxConfig)
			if err != nil {
				t.Fatalf("CreateContainer: %v\ncontainerd log:\n%s", err, ctd.Log())
			}
			if err := rt.StartContainer(ctx, cid); err != nil {
				t.Fatalf("StartContainer: %v\ncontainerd log:\n%s", err, ctd.Log())
			}
			waitState(ctx, t, rt, cid, runtimeapi.ContainerState_CONTAINER_RUNNING)

			logPath := filepath.Join(logDir, "hello.log")
			var log string
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				b, _ := os.ReadFile(logPath)
				log = string(b)
				return strings.Contains(log, "hello from ") && strings.Contains(log, "127.0.0.1"), nil
			})
			if err != nil {
				t.Fatalf("container log %s = %q, want the hello line and lo's 127.0.0.1", logPath, log)
			}
			if !strings.Contains(log, " stdout F hello from ") {
				t.Errorf("container log %q is not in CRI's format (<time> stdout F <line>)", log)
			}

			if !tt.hostNetwork {
				// The host reaches the pod over the bridge.
				url := "http://" + net.JoinHostPort(podIP, "8080") + "/index.html"
				var body string
				err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
					resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
					if err != nil {
						return false, nil
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					body = string(b)
					return resp.StatusCode == http.StatusOK, nil
				})
				if err != nil || !strings.Contains(body, "edgeplane test image") {
					t.Fatalf("GET %s: %v, body %q", url, err, body)
				}
			}

			if err := rt.StopContainer(ctx, cid, 10); err != nil {
				t.Fatalf("StopContainer: %v", err)
			}
			st := waitState(ctx, t, rt, cid, runtimeapi.ContainerState_CONTAINER_EXITED)
			if st.GetExitCode() != 0 {
				t.Errorf("container exit code %d, want 0 (its TERM trap)", st.GetExitCode())
			}
			if err := rt.RemoveContainer(ctx, cid); err != nil {
				t.Fatalf("RemoveContainer: %v", err)
			}
			if err := rt.StopPodSandbox(ctx, podID); err != nil {
				t.Fatalf("StopPodSandbox: %v", err)
			}
			if err := rt.RemovePodSandbox(ctx, podID); err != nil {
				t.Fatalf("RemovePodSandbox: %v", err)
			}
			pods, err := rt.ListPodSandbox(ctx, nil)
			if err != nil || len(pods) != 0 {
				t.Fatalf("ListPodSandbox after removal = %d pods, %v; want none", len(pods), err)
			}
		})
	}
}

func criClients(ctx context.Context, t *testing.T, endpoint string) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = img.Close(ctx) })
	return rt, img
}

func waitState(ctx context.Context, t *testing.T, rt internalapi.RuntimeService, id string, want runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	t.Helper()
	var st *runtimeapi.ContainerStatus
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := rt.ContainerStatus(ctx, id, false)
		if err != nil {
			return false, err
		}
		st = resp.GetStatus()
		return st.GetState() == want, nil
	})
	if err != nil {
		t.Fatalf("container %s: state %v, want %v: %v", id, st.GetState(), want, err)
	}
	return st
}

// randomNetwork picks a bridge name and a /24 no route of the host uses,
// so tests running at the same time do not share them.
func randomNetwork(t *testing.T) (*net.IPNet, string) {
	t.Helper()
	out, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	for range 100 {
		n, err := rand.Int(rand.Reader, big.NewInt(200))
		if err != nil {
			t.Fatal(err)
		}
		cidr := fmt.Sprintf("10.%d.%d.0/24", 150+n.Int64()/100, 50+n.Int64()%100)
		if strings.Contains(string(out), cidr) {
			continue
		}
		_, subnet, _ := net.ParseCIDR(cidr)
		return subnet, "ept" + randomHex(t, 4)
	}
	t.Fatal("no free /24 for the test bridge")
	return nil, ""
}

func writeConflist(t *testing.T, dir, bridge string, subnet *net.IPNet) {
	t.Helper()
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "%s",
  "plugins": [
    {"type": "bridge", "bridge": "%s", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s"}]], "dataDir": "%s"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, bridge, bridge, subnet, filepath.Join(t.TempDir(), "ipam"))
	if err := os.WriteFile(filepath.Join(dir, "10-test.conflist"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
