package conformance

import (
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
)

// TestMirrorPull: a containerd whose registry configuration is
// WriteHostsDir's pulls an image by its upstream name from the Registry,
// as the kubelet does for imagePullPolicy: Always; an image the registry
// does not have fails to pull.
func TestMirrorPull(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd")
	}
	dir := t.TempDir()
	const name = "registry.k8s.io/e2e-test-images/hello:1.0"
	writeTestImage(t, dir, name, "k8s")
	reg, err := NewRegistry(dir)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.String())
		mu.Unlock()
		reg.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := WriteHostsDir(hosts, addr); err != nil {
		t.Fatal(err)
	}
	ctd := testcontainerd.Start(t, testcontainerd.Options{RegistryConfigDir: hosts})
	_, ctx := ktesting.NewTestContext(t)
	img, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(ctd.Endpoint).WithConnectionTimeout(10 * time.Second).WithUseStreaming(false).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = img.Close(ctx) })

	ref, err := img.PullImage(ctx, &runtimeapi.ImageSpec{Image: name}, nil, nil)
	if err != nil {
		t.Fatalf("pull %s through the mirror: %v\ncontainerd log:\n%s", name, err, ctd.Log())
	}
	st, err := img.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
	if err != nil || st.GetImage() == nil || st.GetImage().Id != ref {
		t.Fatalf("ImageStatus(%s) = %v, %v; want image %s", name, st, err, ref)
	}
	mu.Lock()
	got := strings.Join(asked, "\n")
	mu.Unlock()
	if !strings.Contains(got, " /v2/e2e-test-images/hello/manifests/1.0?ns=registry.k8s.io") {
		t.Errorf("the registry was not asked for the manifest by its upstream name; it was asked:\n%s", got)
	}

	// The registry is the server of registry.k8s.io too (WriteHostsDir):
	// a miss ends there as "not found", and the real registry is never
	// dialled (that would fail otherwise, unreachable from here).
	const absent = "registry.k8s.io/e2e-test-images/absent:1.0"
	if _, err := img.PullImage(ctx, &runtimeapi.ImageSpec{Image: absent}, nil, nil); err == nil {
		t.Errorf("%s, which the registry does not have, was pulled", absent)
	} else if !strings.Contains(err.Error(), "not found") {
		t.Errorf("pull of %s: %v, want the registry's not found", absent, err)
	}
	mu.Lock()
	got = strings.Join(asked, "\n")
	mu.Unlock()
	if !strings.Contains(got, "/v2/e2e-test-images/absent/manifests/1.0?ns=registry.k8s.io") {
		t.Errorf("the registry was not asked for %s; it was asked:\n%s", absent, got)
	}
}
