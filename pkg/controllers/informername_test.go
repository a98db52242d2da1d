package controllers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
)

// TestUpstreamInformerNameLeak is the canary of releaseLeakedInformerName's
// workaround: upstream's CreateControllerContext (v1.37.2), failing because
// the API server does not answer, leaves the informer name
// "kube-controller-manager" reserved. When this test fails, upstream releases
// it on its failure paths: delete the workaround and this test.
func TestUpstreamInformerNameLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for upstream's 10 s API server timeout")
	}
	closed := testenv.RefusingAddr(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://" + closed +
		"\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := cmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	s.Generic.ClientConnection.Kubeconfig = kubeconfig
	s.SecureServing.BindPort = 0
	s.Metrics = nil
	ctx := context.Background()
	c, err := s.Config(ctx, cmapp.KnownControllers(), cmapp.ControllersDisabledByDefault(), cmapp.ControllerAliases())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.ResetInformerNamesForTesting)
	builder := clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}
	if _, err := cmapp.CreateControllerContext(ctx, c.Complete(), builder, builder); err == nil {
		t.Fatal("CreateControllerContext succeeded without an API server")
	}
	n, err := cache.NewInformerName(controllerManagerInformerName)
	if err == nil {
		n.Release()
		t.Fatal("upstream released the informer name after a failed CreateControllerContext: delete releaseLeakedInformerName and this test")
	}
	if !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("NewInformerName: %v", err)
	}
	releaseLeakedInformerName(klog.Background())
	n, err = cache.NewInformerName(controllerManagerInformerName)
	if err != nil {
		t.Fatalf("after the workaround: %v", err)
	}
	n.Release()
}
