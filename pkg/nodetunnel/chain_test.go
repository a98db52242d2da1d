package nodetunnel

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
)

// TestThroughTheAPIServer: the real API server chain takes a node's tunnel
// on its port (authenticated by its own authenticator) and reads a pod's
// log from the node's kubelet through it when direct dials are dropped;
// without the tunnel the same request fails.
func TestThroughTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var kubeletAddr string
	var tunnel *Server
	dropped := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		if address == kubeletAddr {
			return errDropped
		}
		return nil
	}}
	kubelet := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "log of "+r.URL.Path+"\n")
	}))
	var srv *testapiserver.Server
	srv = testapiserver.StartWith(t, ctx, testapiserver.Options{Cluster: func(pki *certs.PKI) chain.ClusterNetwork {
		kubelet.TLS = &tls.Config{Certificates: []tls.Certificate{pkiOf(t, pki.KubeletServingCA).serving(t)}}
		kubelet.StartTLS()
		kubeletAddr = kubelet.Listener.Addr().String()
		client, err := kubeclient.New(pki.AdminKubeconfig, Name, kubeclient.Steady)
		if err != nil {
			t.Fatal(err)
		}
		// The API server's Nodes, as the server runs it (bootstrap).
		tunnel = NewServer(ServerOptions{Client: client, Dialer: dropped,
			Informers: func() informers.SharedInformerFactory { return srv.Chain.Informers() }})
		return chain.ClusterNetwork{Dial: tunnel.DialContext, Wrap: tunnel.Handler}
	}})
	t.Cleanup(kubelet.Close)
	if err := tunnel.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tunnel.Stop(context.Background()) })
	client := srv.Client(t)
	port := kubelet.Listener.Addr().(*net.TCPAddr).Port
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status = testNode("a", "127.0.0.1", port).Status
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	no := false
	if _, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: "a", AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: "edgeplane.invalid/none:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logs := func(ctx context.Context) (string, error) {
		b, err := client.CoreV1().Pods("default").GetLogs("p", &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
		return string(b), err
	}
	if err := tunnel.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := logs(ctx); err == nil {
		t.Fatalf("logs without a tunnel, direct dials dropped: %q, want an error", got)
	}

	cfg, err := kubeclient.Config(srv.Kubeconfig, "test", kubeclient.Steady)
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := strings.TrimPrefix(cfg.Host, "https://")
	pki := pkiOf(t, srv.PKI.ClientCA)
	a, err := NewAgent(AgentOptions{
		Mode: ModeAuto, Servers: func() []string { return []string{apiAddr} },
		CAFile: srv.PKI.ServerCA.Cert, CertFile: pki.client(t, "system:node:a", "system:nodes"), KubeletPort: port,
		Local: func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	var got string
	if perr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = logs(ctx)
		return err == nil, nil
	}); perr != nil {
		t.Fatalf("logs through the tunnel: %q, %v (tunnels: %v)", got, err, tunnel.Connected())
	}
	if want := "log of /containerLogs/default/p/c"; !strings.HasPrefix(got, want) {
		t.Fatalf("logs = %q, want %q", got, want)
	}
}
