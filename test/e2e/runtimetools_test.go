package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestRuntimeTools: `edgeplane crictl` and `edgeplane ctr` with no runtime
// flags speak to the managed containerd's socket of the data dir
// (<data-dir>/agent/containerd/containerd.sock; here a link to a containerd
// of the test's own, with the test images imported and a host-network pod
// running), and list its containers and images. crictl is built from
// hack/runtime's pinned cri-tools and put beside the edgeplane binary, as a
// release folder has it; ctr is Debian's, on the PATH. The user's own
// socket or namespace wins, and a managed socket nobody answers on is an
// error that names it.
func TestRuntimeTools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts containerd")
	}
	ctr := testenv.Tool(t, "apt-get install containerd", "ctr")
	ctrd := testcontainerd.Start(t, testcontainerd.Options{Images: true})

	crictl := filepath.Join(filepath.Dir(binary), "crictl")
	if _, err := os.Stat(crictl); err != nil {
		// hack/dist-runtime.sh's flags: TestInstallShippedRuntime's build
		// of it then compiles nothing again.
		build := exec.Command("go", "build", "-C", "../../hack/runtime", "-trimpath", "-ldflags", "-s -w", "-o", crictl, "sigs.k8s.io/cri-tools/cmd/crictl")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build crictl: %v\n%s", err, out)
		}
	}

	dataDir, err := os.MkdirTemp("/tmp", "ep-tools")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	managed := filepath.Join(dataDir, "agent", "containerd", "containerd.sock")
	if err := os.MkdirAll(filepath.Dir(managed), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ctrd.Socket, managed); err != nil {
		t.Fatal(err)
	}
	name := runHostNetworkContainer(t, ctrd)

	// The user's environment, without anything that names a runtime.
	var environ []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "CONTAINER_RUNTIME_ENDPOINT", "IMAGE_SERVICE_ENDPOINT", "CRI_CONFIG_FILE", "CONTAINERD_ADDRESS", "CONTAINERD_NAMESPACE", "EDGEPLANE_DATA_DIR":
			continue
		}
		environ = append(environ, kv)
	}
	environ = append(environ, "PATH="+filepath.Dir(ctr)+":"+os.Getenv("PATH"))
	busyboxRepo, _, _ := strings.Cut(ctrd.BusyboxImage, ":")

	deadDir, err := os.MkdirTemp("/tmp", "ep-tools-dead")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(deadDir) })
	dead := filepath.Join(deadDir, "agent", "containerd", "containerd.sock")
	if err := os.MkdirAll(filepath.Dir(dead), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()

	tests := []struct {
		name    string
		env     []string
		args    []string
		want    []string
		notWant []string
		wantErr bool
	}{
		{name: "crictl ps", env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, args: []string{"crictl", "ps"}, want: []string{name}},
		{name: "crictl images", env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, args: []string{"crictl", "images"}, want: []string{busyboxRepo}},
		{name: "crictl --data-dir", args: []string{"crictl", "--data-dir", dataDir, "ps"}, want: []string{name}},
		{name: "ctr -n k8s.io images ls", env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, args: []string{"ctr", "-n", "k8s.io", "images", "ls"}, want: []string{ctrd.BusyboxImage}},
		{name: "ctr default namespace", env: []string{"EDGEPLANE_DATA_DIR=" + dataDir}, args: []string{"ctr", "containers", "ls"}, want: []string{"busybox"}},
		// The user's namespace wins over the default k8s.io.
		{name: "ctr user's namespace", env: []string{"EDGEPLANE_DATA_DIR=" + dataDir, "CONTAINERD_NAMESPACE=default"}, args: []string{"ctr", "images", "ls"}, notWant: []string{ctrd.BusyboxImage}},
		// The user's endpoint wins over the dead managed socket.
		{name: "crictl user's endpoint", env: []string{"EDGEPLANE_DATA_DIR=" + deadDir}, args: []string{"crictl", "--runtime-endpoint", "unix://" + ctrd.Socket, "ps"}, want: []string{name}},
		{name: "crictl dead managed socket", env: []string{"EDGEPLANE_DATA_DIR=" + deadDir}, args: []string{"crictl", "ps"}, want: []string{"no container runtime answers on " + dead}, wantErr: true},
		{name: "ctr dead managed socket", env: []string{"EDGEPLANE_DATA_DIR=" + deadDir}, args: []string{"ctr", "images", "ls"}, want: []string{"no container runtime answers on " + dead}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, tt.args...)
			cmd.Env = append(append([]string{}, environ...), tt.env...)
			out, err := cmd.CombinedOutput()
			if tt.wantErr != (err != nil) {
				t.Fatalf("edgeplane %s: err %v, want error %t; output:\n%s", strings.Join(tt.args, " "), err, tt.wantErr, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("edgeplane %s does not show %q; output:\n%s", strings.Join(tt.args, " "), w, out)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(string(out), w) {
					t.Errorf("edgeplane %s shows %q; output:\n%s", strings.Join(tt.args, " "), w, out)
				}
			}
		})
	}
}

// runHostNetworkContainer runs a busybox container in a host-network pod
// sandbox through CRI and returns its name.
func runHostNetworkContainer(t *testing.T, ctrd *testcontainerd.Containerd) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(ctrd.Endpoint).WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "tools-" + hex.EncodeToString(b)
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}},
	}
	podID, err := rt.RunPodSandbox(ctx, sandbox, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\ncontainerd log:\n%s", err, ctrd.Log())
	}
	cid, err := rt.CreateContainer(ctx, podID, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: ctrd.BusyboxImage},
		Command:  []string{"/bin/sh", "-c", `trap "exit 0" TERM; sleep 3600 & wait`},
		LogPath:  "c.log",
	}, sandbox)
	if err != nil {
		t.Fatalf("CreateContainer: %v\ncontainerd log:\n%s", err, ctrd.Log())
	}
	if err := rt.StartContainer(ctx, cid); err != nil {
		t.Fatalf("StartContainer: %v\ncontainerd log:\n%s", err, ctrd.Log())
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		st, err := rt.ContainerStatus(ctx, cid, false)
		return err == nil && st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
	})
	if err != nil {
		t.Fatalf("container %s not running: %v", cid, err)
	}
	return name
}
