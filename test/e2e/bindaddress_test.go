package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
