package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// TestClusterNetwork: on two nodes in their own network namespaces, with
// flannel (vxlan) and kube-proxy in-process on both, a pod on one node
// reaches a pod on the other by pod IP; a ClusterIP Service in front of a
// Deployment spread over both nodes answers from a pod on either node, from
// both backends; a NodePort answers from the host; a pod lists namespaces
// through the kubernetes Service with client-go's in-cluster config; and
// externalTrafficPolicy: Local answers only on a node with a backend; the
// packaged CoreDNS answers for Service names through the kube-dns ClusterIP
// from pods on both nodes; a
// LoadBalancer ingress IP that is a node IP answers; and killing and
// restarting the agent keeps its pods' network and routes.
func TestClusterNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two containerds, a server node and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{})

	srvIP := c.runPod(t, "web-s", c.ServerNode, webScript("web-s"), nil)
	agtIP := c.runPod(t, "web-a", c.AgentNode, webScript("web-a"), nil)

	t.Run("pod to pod across nodes by pod IP", func(t *testing.T) {
		c.eventuallyFetch(t, "web-a", "http://"+srvIP+":8080/", "web-s")
		c.eventuallyFetch(t, "web-s", "http://"+agtIP+":8080/", "web-a")
	})

	deployBackends(t, c)
	svcIP := clusterIP(t, c, "echo")

	t.Run("ClusterIP from either node reaches both backends", func(t *testing.T) {
		for _, client := range []string{"web-s", "web-a"} {
			seen := map[string]bool{}
			eventually(t, 90*time.Second, client+" gets answers from both backends of "+svcIP, func(context.Context) (bool, error) {
				got, err := c.fetch(client, "http://"+svcIP+":80/")
				if err != nil {
					return false, fmt.Errorf("%v: %s", err, got)
				}
				seen[got] = true
				return len(seen) == 2, fmt.Errorf("answers so far: %v", seen)
			})
			for name := range seen {
				if !strings.HasPrefix(name, "echo-") {
					t.Errorf("%s got %q from the Service, not a backend's name", client, name)
				}
			}
		}
	})

	t.Run("DNS names resolve to ClusterIPs from either node", func(t *testing.T) {
		names := map[string]string{
			"echo.default.svc.cluster.local":       svcIP,
			"kubernetes.default.svc.cluster.local": "10.43.0.1",
		}
		for _, client := range []string{"web-s", "web-a"} {
			for name, want := range names {
				eventually(t, 3*time.Minute, client+" resolves "+name+" to "+want, func(context.Context) (bool, error) {
					out, err := c.podExec(client, "nslookup", name)
					if err != nil {
						return false, fmt.Errorf("%v: %s", err, out)
					}
					err = checkNslookup(out, name, want)
					return err == nil, err
				})
			}
		}
	})

	t.Run("NodePort answers from the host", func(t *testing.T) {
		if out, err := c.kubectl("expose", "deployment", "echo", "--name=echo-np", "--type=NodePort", "--port=80", "--target-port=8080"); err != nil {
			t.Fatalf("kubectl expose: %v\n%s", err, out)
		}
		port := nodePort(t, c, "echo-np")
		for _, ip := range []string{c.ServerIP, c.AgentIP} {
			url := fmt.Sprintf("http://%s:%d/", ip, port)
			eventually(t, 90*time.Second, "host fetches "+url, func(ctx context.Context) (bool, error) {
				body, err := hostGet(ctx, url)
				if err != nil {
					return false, err
				}
				return strings.HasPrefix(body, "echo-"), fmt.Errorf("got %q", body)
			})
		}
	})

	t.Run("externalTrafficPolicy Local answers only where a backend runs", func(t *testing.T) {
		// web-s runs on the server node only.
		if out, err := c.kubectl("expose", "pod", "web-s", "--name=web-local", "--type=NodePort", "--port=80", "--target-port=8080",
			"--overrides", `{"apiVersion":"v1","spec":{"externalTrafficPolicy":"Local"}}`); err != nil {
			t.Fatalf("kubectl expose: %v\n%s", err, out)
		}
		port := nodePort(t, c, "web-local")
		url := fmt.Sprintf("http://%s:%d/", c.ServerIP, port)
		eventually(t, 90*time.Second, "host fetches "+url, func(ctx context.Context) (bool, error) {
			body, err := hostGet(ctx, url)
			return err == nil && body == "web-s", fmt.Errorf("got %q, %v", body, err)
		})
		// Precondition: the agent's kube-proxy has programmed web-local. A
		// pod on the agent reaching its ClusterIP shows it: kube-proxy
		// writes a Service's ClusterIP and NodePort rules in one sync. A
		// NodePort the agent has not programmed yet, or never will (its
		// kube-proxy down), would not answer either.
		localIP := clusterIP(t, c, "web-local")
		c.eventuallyFetch(t, "web-a", "http://"+localIP+":80/", "web-s")
		// The agent node has no local backend: upstream drops the traffic.
		// Three tries: a path that answers now and then fails the test too.
		agentURL := fmt.Sprintf("http://%s:%d/", c.AgentIP, port)
		for try := 1; try <= 3; try++ {
			if body, err := hostGet(context.Background(), agentURL); err == nil {
				t.Fatalf("try %d: the agent node answered %q at %s for an externalTrafficPolicy: Local Service with no local backend", try, body, agentURL)
			}
		}
	})

	t.Run("a LoadBalancer ingress IP that is a node IP answers", func(t *testing.T) {
		if out, err := c.kubectl("expose", "deployment", "echo", "--name=echo-lb", "--type=LoadBalancer", "--port=8081", "--target-port=8080"); err != nil {
			t.Fatalf("kubectl expose: %v\n%s", err, out)
		}
		// What the service load balancer sets: the node addresses.
		patch := fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":%q},{"ip":%q}]}}}`, c.ServerIP, c.AgentIP)
		if out, err := c.kubectl("patch", "service", "echo-lb", "--subresource=status", "--type=merge", "-p", patch); err != nil {
			t.Fatalf("kubectl patch status: %v\n%s", err, out)
		}
		for _, ip := range []string{c.ServerIP, c.AgentIP} {
			url := "http://" + ip + ":8081/"
			eventually(t, 90*time.Second, "host fetches "+url, func(ctx context.Context) (bool, error) {
				body, err := hostGet(ctx, url)
				return err == nil && strings.HasPrefix(body, "echo-"), fmt.Errorf("got %q, %v", body, err)
			})
		}
	})

	t.Run("in-cluster client lists namespaces through the kubernetes Service", func(t *testing.T) {
		if out, err := c.kubectl("create", "clusterrolebinding", "default-view-ns", "--clusterrole=view", "--serviceaccount=default:default"); err != nil {
			t.Fatalf("kubectl create clusterrolebinding: %v\n%s", err, out)
		}
		// view grants no cluster-scoped namespaces list: add a role that does.
		if out, err := c.kubectl("create", "clusterrole", "ns-reader", "--verb=list", "--resource=namespaces"); err != nil {
			t.Fatalf("kubectl create clusterrole: %v\n%s", err, out)
		}
		if out, err := c.kubectl("create", "clusterrolebinding", "default-ns-reader", "--clusterrole=ns-reader", "--serviceaccount=default:default"); err != nil {
			t.Fatalf("kubectl create clusterrolebinding: %v\n%s", err, out)
		}
		for _, pod := range []string{"web-s", "web-a"} {
			eventually(t, 90*time.Second, pod+" lists namespaces in-cluster", func(context.Context) (bool, error) {
				out, err := c.podExec(pod, "incluster")
				if err != nil {
					return false, fmt.Errorf("%v: %s", err, out)
				}
				return strings.Contains(out, "kube-system") && strings.Contains(out, "default"), fmt.Errorf("output %q", out)
			})
		}
	})

	t.Run("agent restart keeps its pods' network and routes", func(t *testing.T) {
		routesBefore := flannelRoutes(t, c.AgentNS)
		if len(routesBefore) == 0 {
			t.Fatalf("no route to the server's pod CIDR in %s", c.AgentNS)
		}
		c.Agent.kill()
		// While the agent is down, its pod still reaches the server's pod.
		if got, err := c.fetch("web-s", "http://"+agtIP+":8080/"); err != nil || got != "web-a" {
			t.Errorf("with the agent down, web-s fetched %q, %v from web-a; want web-a", got, err)
		}
		c.Agent = c.startAgent(t)
		waitNodeReady(t, c.Server, c.AgentNode)
		c.eventuallyFetch(t, "web-a", "http://"+srvIP+":8080/", "web-s")
		eventually(t, 90*time.Second, "web-a reaches the echo Service after the restart", func(context.Context) (bool, error) {
			got, err := c.fetch("web-a", "http://"+svcIP+":80/")
			return err == nil && strings.HasPrefix(got, "echo-"), fmt.Errorf("got %q, %v", got, err)
		})
		if after := flannelRoutes(t, c.AgentNS); strings.Join(after, "\n") != strings.Join(routesBefore, "\n") {
			t.Errorf("routes through flannel.1 changed across the restart:\nbefore %q\nafter  %q", routesBefore, after)
		}
		p, err := c.Server.client.CoreV1().Pods("default").Get(context.Background(), "web-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.PodIP != agtIP {
			t.Errorf("web-a's IP changed across the restart: %s, was %s", p.Status.PodIP, agtIP)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("web-a's container restarted %d times across the agent restart", cs.RestartCount)
			}
		}
	})
}

// deployBackends runs Deployment echo (2 replicas, one per node by
// required anti-affinity; each answers with its pod name on 8080) and the
// ClusterIP Service echo on port 80.
func deployBackends(t *testing.T, c *twoNodeCluster) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: echo}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: echo
        image: %s
        command: [sh, -c, 'mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www']
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
`, testimage.DefaultBusyboxName)
	cmd := exec.Command("kubectl", "--kubeconfig", c.Server.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	pods := runningPods(t, c.Server, "echo", 2)
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
	}
	if !nodes[c.ServerNode] || !nodes[c.AgentNode] {
		t.Fatalf("echo pods run on %v, want one on each node", nodes)
	}
}

func clusterIP(t *testing.T, c *twoNodeCluster, name string) string {
	t.Helper()
	svc, err := c.Server.client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("service %s: type %s, cluster IP %q", name, svc.Spec.Type, svc.Spec.ClusterIP)
	}
	return svc.Spec.ClusterIP
}

func nodePort(t *testing.T, c *twoNodeCluster, name string) int32 {
	t.Helper()
	svc, err := c.Server.client.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("service %s has no node port: %+v", name, svc.Spec.Ports)
	}
	return svc.Spec.Ports[0].NodePort
}

// hostGet fetches url from the host (over the test's bridge).
func hostGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b)), err
}

// flannelRoutes lists ns's routes through flannel's vxlan device.
func flannelRoutes(t *testing.T, ns string) []string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "route", "show", "dev", "flannel.1").CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s route show dev flannel.1: %v: %s", ns, err, out)
	}
	var routes []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			routes = append(routes, l)
		}
	}
	return routes
}

// TestClusterNetworkHostGW: with --flannel-backend=host-gw the agent takes
// the server's choice, each node routes the other's pod CIDR straight to
// the other's address (no encapsulation), and pods reach each other.
func TestClusterNetworkHostGW(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two containerds, a server node and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{ServerArgs: []string{"--flannel-backend=host-gw"}})
	srvIP := c.runPod(t, "web-s", c.ServerNode, webScript("web-s"), nil)
	agtIP := c.runPod(t, "web-a", c.AgentNode, webScript("web-a"), nil)
	c.eventuallyFetch(t, "web-a", "http://"+srvIP+":8080/", "web-s")
	c.eventuallyFetch(t, "web-s", "http://"+agtIP+":8080/", "web-a")

	srv, err := c.Server.client.CoreV1().Nodes().Get(context.Background(), c.ServerNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "-n", c.AgentNS, "route", "show", srv.Spec.PodCIDR).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "via "+c.ServerIP+" dev eth0") {
		t.Errorf("agent's route to the server's pod CIDR %s = %q, want via %s dev eth0", srv.Spec.PodCIDR, out, c.ServerIP)
	}
	if err := exec.Command("ip", "-n", c.AgentNS, "link", "show", "flannel.1").Run(); err == nil {
		t.Errorf("host-gw node has a flannel.1 vxlan device")
	}
}
