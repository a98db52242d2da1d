package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestBindOneAddress serves the API on one address that is not 127.0.0.1:
// the in-process controller-manager and scheduler, whose kubeconfigs named
// 127.0.0.1, could not reach it and the server did not start. Now the
// kubeconfigs name the bind address, the serving certificate holds it, and
// the controllers run (a new namespace gets its default ServiceAccount).
func TestBindOneAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t)
	dir := t.TempDir()
	s := startServer(t, dir, "--bind-address", "127.0.0.2")
	for _, name := range []string{"admin.kubeconfig", "controller-manager.kubeconfig", "scheduler.kubeconfig"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "server: https://127.0.0.2:") {
			t.Errorf("%s does not name the bind address 127.0.0.2:\n%s", name, data)
		}
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bound"}}
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the default ServiceAccount in a new namespace", func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().ServiceAccounts("bound").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// TestLoopbackPublishesNoEndpoint: a server bound to every address lists
// the host's address as the kubernetes Service's endpoint; restarted on the
// same data bound to loopback, where pods and nodes cannot connect, it
// publishes none, removes the one it published before, and says so once.
// Before, a loopback-bound server listed the host's address, where nothing
// listened.
func TestLoopbackPublishesNoEndpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t)
	advertise, err := utilnet.ChooseHostInterface()
	testenv.Require(t, "a host address to advertise (an interface with a default route)", err)
	dir := t.TempDir()

	s := startServer(t, dir, "--bind-address", "0.0.0.0")
	eventually(t, time.Minute, "the kubernetes endpoint "+advertise.String(), func(ctx context.Context) (bool, error) {
		ips, err := endpointIPs(ctx, s)
		return slices.Equal(ips, []string{advertise.String()}), fmt.Errorf("endpoints %v, %v", ips, err)
	})
	s.stop()

	s = startServer(t, dir) // the harness's --bind-address 127.0.0.1
	ctx := context.Background()
	if ips, err := endpointIPs(ctx, s); !apierrors.IsNotFound(err) {
		t.Errorf("kubernetes Endpoints of a loopback server: %v, %v; want none", ips, err)
	}
	if slice, err := s.client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("kubernetes EndpointSlice of a loopback server: %v, %v; want none", slice, err)
	}
	if n := strings.Count(s.output.String(), "the kubernetes Service gets no endpoint"); n != 1 {
		t.Errorf("the start said %d times that the Service gets no endpoint, want once:\n%s", n, tail(s.output.String()))
	}
}
