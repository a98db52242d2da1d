package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// TestClusterDNS: the server applies the packaged CoreDNS manifest with
// --coredns-image taken from the airgap directory (a CoreDNS built from its
// Go module by internal/testing/testimage), the CoreDNS pod gets Ready, a pod's
// resolv.conf names the kube-dns address (the tenth of the service CIDR),
// and CoreDNS answers for Services by name.
//
// The server runs in the host's network namespace, shared with other tests,
// so its node runs no kube-proxy and no ClusterIP answers: the test points
// CoreDNS's in-cluster client at the API on the node's address
// (KUBERNETES_SERVICE_HOST/PORT, which a container's own env overrides), and
// the client pod asks the CoreDNS pod's IP. TestMakeRun checks the same
// through the Services, with kube-proxy, in a network namespace of its own.
func TestClusterDNS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds CoreDNS, runs containerd, a server and its kubelet")
	}
	var img testimage.Image
	parallelNode(t, func() { img = coreDNSImage(t) })
	// The pods' cgroups stay out of /kubepods: a kubelet of another test on
	// this host kills the processes of pod cgroups there that it does not
	// know (its orphaned-pod cgroup cleanup), as agentKubeletArgs says. A
	// first run lost its CoreDNS and client sandboxes at once ("namespace
	// path: lstat /proc/<pause>/ns/ipc: no such file") while another
	// worktree's e2e test ran kubelets on this host; with these flags it
	// passed.
	s, _, _ := nodeServerWith(t, nodeServerOptions{images: []testimage.Image{img}},
		"--coredns-image", testimage.DefaultCoreDNSName,
		"--kubelet-arg=cgroups-per-qos=false", "--kubelet-arg=enforce-node-allocatable=")

	eventually(t, time.Minute, "the packaged coredns Deployment", func(ctx context.Context) (bool, error) {
		_, err := s.client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		return err == nil, err
	})
	api, err := url.Parse(s.config.Host)
	if err != nil {
		t.Fatal(err)
	}
	node, err := s.client.CoreV1().Nodes().Get(context.Background(), "edge-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodeIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if out, err := s.kubectl("-n", "kube-system", "set", "env", "deployment/coredns",
		"KUBERNETES_SERVICE_HOST="+nodeIP, "KUBERNETES_SERVICE_PORT="+api.Port()); err != nil {
		t.Fatalf("kubectl set env: %v\n%s", err, out)
	}

	var dnsIP string
	eventually(t, 3*time.Minute, "a Ready CoreDNS pod", func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil {
			return false, err
		}
		var states []string
		for _, p := range pods.Items {
			states = append(states, p.Name+"="+string(p.Status.Phase)+podReason(p))
			if p.DeletionTimestamp == nil && podReady(p) && hasEnv(p, "KUBERNETES_SERVICE_HOST") {
				dnsIP = p.Status.PodIP
				return true, nil
			}
		}
		return false, fmt.Errorf("pods: %s", strings.Join(states, ", "))
	})

	if out, err := s.kubectl("run", "dnsclient", "--image="+testimage.DefaultBusyboxName, "--restart=Never", "--command", "--", "sleep", "3600"); err != nil {
		t.Fatalf("kubectl run: %v\n%s", err, out)
	}
	eventually(t, 3*time.Minute, "the dnsclient pod running", func(ctx context.Context) (bool, error) {
		p, err := s.client.CoreV1().Pods("default").Get(ctx, "dnsclient", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s%s", p.Status.Phase, podReason(*p))
	})

	resolv, err := s.kubectl("exec", "dnsclient", "--", "cat", "/etc/resolv.conf")
	if err != nil {
		t.Fatalf("cat /etc/resolv.conf: %v\n%s", err, resolv)
	}
	for _, want := range []string{"nameserver 10.43.0.10", "search default.svc.cluster.local svc.cluster.local cluster.local"} {
		if !strings.Contains(resolv, want) {
			t.Errorf("the pod's resolv.conf lacks %q:\n%s", want, resolv)
		}
	}

	tests := []struct{ name, want string }{
		{name: "kubernetes.default.svc.cluster.local", want: "10.43.0.1"},
		{name: "kube-dns.kube-system.svc.cluster.local", want: "10.43.0.10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eventually(t, time.Minute, "nslookup "+tc.name, func(context.Context) (bool, error) {
				out, err := s.kubectl("exec", "dnsclient", "--", "nslookup", tc.name, dnsIP)
				if err != nil {
					return false, fmt.Errorf("%v: %s", err, out)
				}
				err = checkNslookup(out, tc.name, tc.want)
				return err == nil, err
			})
		})
	}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasEnv(p corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return true
			}
		}
	}
	return false
}
