package registries

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/internal/testing/testregistry"
)

// TestPullThroughMirror: a registries.yaml that mirrors docker.io to a
// local registry with basic auth, turned into hosts.toml (WriteHosts) and
// CRI auth entries (Auths) for a containerd of the test's own: a CRI
// PullImage of docker.io/library/hello:1.0 is served by the mirror with
// the right password, and fails with an error that says unauthorized with
// a wrong one. A mirror for * (the _default directory) with the
// credentials of configs."*" serves quay.io's name. No other registry is
// reachable.
func TestPullThroughMirror(t *testing.T) {
	const name = "docker.io/library/hello:1.0"
	images := t.TempDir()
	for _, n := range []string{name, "quay.io/edge/hello:1.0"} {
		img := testimage.Busybox()
		img.Name = n
		if _, err := testimage.Write(images, img); err != nil {
			t.Fatal(err)
		}
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

	for _, tc := range []struct {
		name, image, password string
		wildcard              bool
		wantErr               string
	}{
		{name: "right password", image: name, password: "right"},
		{name: "wrong password", image: name, password: "wrong", wantErr: "unauthorized"},
		{name: "mirror and credentials for every registry", image: "quay.io/edge/hello:1.0", password: "right", wildcard: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "registries.yaml")
			yaml := fmt.Sprintf("mirrors:\n  docker.io:\n    endpoint: [\"http://%s\"]\nconfigs:\n  %q:\n    auth: {username: edge, password: %q}\n", addr, addr, tc.password)
			if tc.wildcard {
				yaml = fmt.Sprintf("mirrors:\n  \"*\":\n    endpoint: [\"http://%s\"]\nconfigs:\n  \"*\":\n    auth: {username: edge, password: %q}\n", addr, tc.password)
			}
			if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := Load(file)
			if err != nil {
				t.Fatal(err)
			}
			certs := filepath.Join(dir, "certs.d")
			if err := r.WriteHosts(certs); err != nil {
				t.Fatal(err)
			}
			var auths []testcontainerd.RegistryAuth
			for _, a := range r.Auths() {
				auths = append(auths, testcontainerd.RegistryAuth{Host: a.Host, Username: a.Username, Password: a.Password})
			}
			ctd := testcontainerd.Start(t, testcontainerd.Options{RegistryConfigDir: certs, RegistryAuths: auths})

			conn, err := grpc.NewClient(ctd.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			name := tc.image
			resp, err := runtimeapi.NewImageServiceClient(conn).PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: name}})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("PullImage %s through the mirror: %v", name, err)
				}
				t.Logf("pulled %s: %s", name, resp.ImageRef)
				return
			}
			if err == nil {
				t.Fatalf("PullImage %s with a wrong password: no error", name)
			}
			if !strings.Contains(strings.ToLower(err.Error()), tc.wantErr) {
				t.Fatalf("PullImage %s with a wrong password: %v; want an error that says %s", name, err, tc.wantErr)
			}
			t.Logf("PullImage with a wrong password: %v", err)
		})
	}
}
