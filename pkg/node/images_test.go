package node

import (
	"context"
	"os"
	"testing"
	"time"

	imagesapi "github.com/containerd/containerd/api/services/images/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/airgap"
	"github.com/edgeplane/edgeplane/pkg/criruntime"
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

// TestImagesSandboxImage: with a runtime configured with another sandbox
// image than --pause-image (a host containerd's sandbox_image), the
// runtime's, imported from the airgap directory, is pinned too (its pods
// use it); and the embedded pause image is imported when it is the
// runtime's sandbox image, whatever --pause-image says.
func TestImagesSandboxImage(t *testing.T) {
	if !pauseimage.Available() {
		t.Skip("no pause image is embedded for this architecture")
	}
	for _, tc := range []struct {
		name                  string
		runtimePause, flag    string
		airgapPause, embedded bool
	}{
		{name: "runtime's from the airgap directory", runtimePause: testimage.DefaultPauseName, flag: pauseimage.Name, airgapPause: true, embedded: true},
		{name: "runtime's is the embedded one", runtimePause: pauseimage.Name, flag: "registry.k8s.io/pause:3.6", embedded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctd := testcontainerd.Start(t, testcontainerd.Options{PauseImage: tc.runtimePause})
			rt, err := criruntime.Detect(ctx, ctd.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			p := PathsIn(dir)
			if tc.airgapPause {
				if err := os.MkdirAll(p.Images, 0o700); err != nil {
					t.Fatal(err)
				}
				img := testimage.Pause()
				img.Name = tc.runtimePause
				if _, err := testimage.Write(p.Images, img); err != nil {
					t.Fatal(err)
				}
			}
			i := imagesPart(ctx, Settings{PauseImage: tc.flag}, p, rt)
			if err := i.Start(ctx); err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() { _ = i.Stop(context.Background()) })

			conn, err := grpc.NewClient(ctd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			images := imagesapi.NewImagesClient(conn)
			nsCtx := metadata.NewOutgoingContext(ctx, metadata.Pairs("containerd-namespace", "k8s.io"))
			labels := func(name string) (map[string]string, bool) {
				res, err := images.Get(nsCtx, &imagesapi.GetImageRequest{Name: name})
				if status.Code(err) == codes.NotFound {
					return nil, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return res.Image.Labels, true
			}
			if tc.airgapPause {
				if l, ok := labels(tc.runtimePause); !ok || l[airgap.LabelCRIPinned] != "pinned" {
					t.Errorf("the runtime's sandbox image %s: found %t, labels %v; want it pinned", tc.runtimePause, ok, l)
				}
			}
			if l, ok := labels(pauseimage.Name); ok != tc.embedded || (ok && l[airgap.LabelCRIPinned] != "pinned") {
				t.Errorf("the embedded image %s: found %t, labels %v; want found %t, pinned", pauseimage.Name, ok, l, tc.embedded)
			}
		})
	}
}
