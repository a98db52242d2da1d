package pauseimage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/api/events"
	eventsapi "github.com/containerd/containerd/api/services/events/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
)

// TestSandbox imports the embedded image into a containerd of the test's
// own, configured with Name as its sandbox image and no registry it could
// reach (the name's host is under .invalid), runs a host-network pod
// sandbox (what a pod with hostNetwork gets), and sends the sandbox's pause
// process SIGTERM: it exits with status 0. A second Import imports nothing;
// one after the image was removed (image GC) imports it again.
func TestSandbox(t *testing.T) {
	if !Available() {
		t.Skip("no pause image is embedded for this architecture")
	}
	ctd := testcontainerd.Start(t, testcontainerd.Options{PauseImage: Name})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	imported, err := Import(ctx, ctd.Endpoint, dir)
	if err != nil || !imported {
		t.Fatalf("Import: %v, %v; want the image imported", imported, err)
	}
	if imported, err := Import(ctx, ctd.Endpoint, dir); err != nil || imported {
		t.Fatalf("second Import: %v, %v; want nothing to import", imported, err)
	}

	conn, err := grpc.NewClient(ctd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	img := runtimeapi.NewImageServiceClient(conn)
	st, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: Name}})
	if err != nil || st.Image == nil {
		t.Fatalf("CRI ImageStatus %s: %v, %v", Name, st, err)
	}

	// Subscribe to task exits before the sandbox runs, to see its pause's.
	evCtx, evCancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.Pairs("containerd-namespace", "k8s.io")))
	defer evCancel()
	stream, err := eventsapi.NewEventsClient(conn).Subscribe(evCtx, &eventsapi.SubscribeRequest{Filters: []string{`topic=="/tasks/exit"`}})
	if err != nil {
		t.Fatal(err)
	}
	exits := make(chan *events.TaskExit, 8)
	go func() {
		for {
			env, err := stream.Recv()
			if err != nil {
				close(exits)
				return
			}
			var e events.TaskExit
			if err := proto.Unmarshal(env.Event.GetValue(), &e); err == nil {
				exits <- &e
			}
		}
	}()

	run, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "pause-test", Namespace: "default", Uid: "pause-test-uid"},
		LogDirectory: t.TempDir(),
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE},
		}},
	}})
	if err != nil {
		t.Fatalf("RunPodSandbox with the embedded sandbox image %s: %v", Name, err)
	}
	status, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: run.PodSandboxId, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if status.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("sandbox state %v, want ready", status.Status.State)
	}
	var info struct {
		Pid   int    `json:"pid"`
		Image string `json:"image"`
	}
	if err := json.Unmarshal([]byte(status.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("sandbox info %q: %v", status.Info["info"], err)
	}
	t.Logf("sandbox %s runs pause as host PID %d (image %s)", run.PodSandboxId, info.Pid, info.Image)

	// A SIGTERM that comes before pause's signal.Notify is lost (PID 1 of
	// its namespace ignores a signal it has no handler for) or ends it
	// through the Go runtime's default (status 2); pause says nothing a
	// sandbox's caller can read, so the test waits until every thread of
	// it sleeps, a few samples in a row: its main goroutine then waits for
	// signals, past Notify.
	waitSettled(t, info.Pid)
	if err := syscall.Kill(info.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-exits:
			if !ok {
				t.Fatal("containerd's event stream ended")
			}
			if e.ContainerID != run.PodSandboxId {
				continue
			}
			if e.ExitStatus != 0 {
				t.Fatalf("the sandbox's pause exited with status %d after SIGTERM, want 0", e.ExitStatus)
			}
			evCancel()
			goto removed
		case <-timeout:
			t.Fatal("the sandbox's pause did not exit within 30s of SIGTERM")
		}
	}
removed:
	// Image GC (kubelet's RemoveImage) takes the image; Import puts it back.
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: run.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: run.PodSandboxId}); err != nil {
		t.Fatal(err)
	}
	if _, err := img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: Name}}); err != nil {
		t.Fatal(err)
	}
	if imported, err := Import(ctx, ctd.Endpoint, dir); err != nil || !imported {
		t.Fatalf("Import after the image was removed: %v, %v; want it imported again", imported, err)
	}
}

// waitSettled waits (at most 20 s) until every thread of pid has been
// sleeping in three samples 50 ms apart.
func waitSettled(t *testing.T, pid int) {
	t.Helper()
	settled := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatalf("pause (PID %d): %v", pid, err)
		}
		asleep := len(tasks) > 0
		for _, task := range tasks {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			// The state follows the command's closing parenthesis.
			i := bytes.LastIndexByte(stat, ')')
			if err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] != 'S' {
				asleep = false
				break
			}
		}
		if !asleep {
			settled = 0
			continue
		}
		if settled++; settled == 3 {
			return
		}
	}
	t.Fatalf("pause (PID %d) did not settle within 20s", pid)
}
