package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/internal/testing/testregistry"
	"github.com/edgeplane/edgeplane/pkg/containerd"
	"github.com/edgeplane/edgeplane/pkg/registries"
)

// TestManagedContainerdRegistries: the node's registries.yaml reaches the
// containerd the node runs. A mirror of docker.io on a registry that asks
// for a password: with the file's right password a CRI pull of a
// docker.io name is served by the mirror; with a wrong one it fails as
// unauthorized; after the file drops the mirror, the next start removes
// its hosts.toml.
func TestManagedContainerdRegistries(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Require(t, "root (containerd needs it)", errors.New("not root"))
	}
	_, err := exec.LookPath("runc")
	testenv.Require(t, "runc (apt-get install runc)", err)
	b, err := containerd.FindBinary(t.Context())
	testenv.Require(t, "containerd (apt-get install containerd runc)", err)

	const image = "docker.io/library/hello:1.0"
	images := t.TempDir()
	img := testimage.Busybox()
	img.Name = image
	if _, err := testimage.Write(images, img); err != nil {
		t.Fatal(err)
	}
	reg, err := testregistry.New(images)
	if err != nil {
		t.Fatal(err)
	}
	reg.Username, reg.Password = "edge", "right"
	l, err := reg.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()

	dataDir := t.TempDir()
	p := PathsIn(filepath.Join(dataDir, DirName))
	// These test machines refuse a negative oom_score_adj: the user
	// template restricts the CRI plugin's (a machine quirk, test only).
	if err := os.MkdirAll(p.Containerd, 0o700); err != nil {
		t.Fatal(err)
	}
	tmpl := strings.Replace(containerd.BaseTemplate(), "  enable_selinux = false\n", "  enable_selinux = false\n  restrict_oom_score_adj = true\n", 1)
	if err := os.WriteFile(filepath.Join(p.Containerd, containerd.TemplateFile), []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, yaml string, pull func(ctx context.Context, images runtimeapi.ImageServiceClient)) {
		file := filepath.Join(t.TempDir(), "registries.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := registries.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		s := Settings{PauseImage: testimage.DefaultPauseName, CNIConfDir: t.TempDir(), Registries: r,
			KubeletArgs: []string{"cgroup-driver=cgroupfs"}}
		c, err := NewManagedContainerd(ctx, s, p, b)
		if err != nil {
			t.Fatal(err)
		}
		defer testcontainerd.Teardown(c.Socket(), filepath.Join(p.Containerd, containerd.RootDir), filepath.Join(p.Containerd, containerd.StateDir),
			func() { _ = c.Stop(context.Background()) }, t.Logf)
		if err := c.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := c.Ready(ctx); err != nil {
			t.Fatalf("Ready: %v", err)
		}
		conn, err := grpc.NewClient(c.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pull(ctx, runtimeapi.NewImageServiceClient(conn))
	}
	mirror := func(password string) string {
		return fmt.Sprintf("mirrors:\n  docker.io:\n    endpoint: [\"http://%s\"]\nconfigs:\n  %q:\n    auth: {username: edge, password: %q}\n", addr, addr, password)
	}
	hosts := filepath.Join(p.ContainerdCerts, "docker.io", "hosts.toml")

	t.Run("right password", func(t *testing.T) {
		run(t, mirror("right"), func(ctx context.Context, images runtimeapi.ImageServiceClient) {
			if _, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
				t.Fatalf("PullImage %s through the mirror: %v", image, err)
			}
		})
		if fi, err := os.Stat(hosts); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v; want a file of mode 0600", hosts, err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		run(t, mirror("wrong"), func(ctx context.Context, images runtimeapi.ImageServiceClient) {
			_, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/hello:1.0"}})
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
				t.Fatalf("PullImage with a wrong password: %v; want unauthorized", err)
			}
		})
	})
	t.Run("mirror dropped from the file", func(t *testing.T) {
		run(t, "mirrors: {}\n", func(context.Context, runtimeapi.ImageServiceClient) {})
		if _, err := os.Stat(hosts); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the mirror left the file: %v; want it removed", hosts, err)
		}
	})
}
