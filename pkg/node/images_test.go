package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/pkg/pauseimage"
)

// TestImagesPause: the Images part imports the embedded pause image at
// start, and imports it again while the node runs once it is gone from
// containerd (what the kubelet's image GC does on containerd 1.6, which
// does not report the sandbox image pinned). Stop ends the look-out.
func TestImagesPause(t *testing.T) {
	if !pauseimage.Available() {
		t.Skip("no pause image is embedded for this architecture")
	}
	ctd := testcontainerd.Start(t, testcontainerd.Options{PauseImage: pauseimage.Name})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient(ctd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	img := runtimeapi.NewImageServiceClient(conn)
	present := func() bool {
		st, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: pauseimage.Name}})
		if err != nil {
			t.Fatalf("CRI ImageStatus: %v", err)
		}
		return st.Image != nil
	}

	dir := t.TempDir()
	i := &Images{Dir: dir + "/images", RuntimeEndpoint: ctd.Endpoint, Pinned: []string{pauseimage.Name},
		PauseDir: dir + "/pause-image", PauseCheck: 100 * time.Millisecond}
	if err := i.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = i.Stop(context.Background()) })
	if !present() {
		t.Fatalf("%s is not in containerd after Start", pauseimage.Name)
	}
	if _, err := img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: pauseimage.Name}}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return present(), nil
	}); err != nil {
		t.Fatalf("%s removed from containerd is not imported again within 20s", pauseimage.Name)
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	defer stopCancel()
	if err := i.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
