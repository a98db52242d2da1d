package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// TestMetricsServer: on a two-node cluster (the server its own node, an
// agent), with no flags, the resource metrics API answers from the
// server's process, reading real kubelets: `kubectl top nodes` lists both
// nodes and `kubectl top pods -A` every running pod, with figures that are
// not zero; a HorizontalPodAutoscaler (CPU and memory) on a Deployment
// whose pod burns CPU scales it from 1 to 2 and, once the pods idle, back
// to 1. A node whose "kubelet" serves a certificate from the server CA
// (what every client trusts for the API server, and what kubelets served
// before the kubelet-serving CA) is refused during the handshake and never
// asked: it has no figures. And what a user installs first: a chart
// (a HelmChart with chartContent) with a claim, an Ingress and an HPA runs
// with no flags (checkApplicationChart).
func TestMetricsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd, a server, its kubelet and an agent")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{})
	s := c.Server
	ctx := context.Background()
	mc := metricsclient.NewForConfigOrDie(s.config)

	// A pod on each node that does a little work every second: figures
	// for pods on both nodes that are never zero.
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ticker", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ticker"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "ticker"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{Name: "tick", Image: testimage.DefaultBusyboxName, Command: []string{"sh", "-c",
						"while true; do i=0; while [ $i -lt 500 ]; do i=$((i+1)); done; sleep 1; done"}}},
				},
			},
		},
	}
	if _, err := s.client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPods(t, s, "ticker", 2)

	t.Run("kubectl top nodes", func(t *testing.T) {
		var rows map[string][2]resource.Quantity
		eventually(t, 2*time.Minute, "kubectl top nodes listing both nodes", func(context.Context) (bool, error) {
			out, err := topTable("kubectl", "--kubeconfig", s.kubeconfig, "top", "nodes")
			if err != nil {
				return false, err
			}
			rows, err = topRows(out)
			if err != nil {
				return false, err
			}
			return len(rows) == 2, fmt.Errorf("rows %v in:\n%s", rows, out)
		})
		for _, node := range []string{c.ServerNode, c.AgentNode} {
			r, ok := rows[node]
			if !ok {
				t.Errorf("kubectl top nodes does not list %s: %v", node, rows)
				continue
			}
			if r[0].IsZero() || r[1].IsZero() {
				t.Errorf("%s: CPU %s, memory %s: want both above zero", node, r[0].String(), r[1].String())
			}
		}
		// The kubectl of the binary (Kubernetes v1.37, which asks for
		// metrics.k8s.io/v1 first) reads the same.
		out, err := topTable(binary, "kubectl", "--kubeconfig", s.kubeconfig, "top", "nodes")
		if err != nil {
			t.Fatalf("edgeplane kubectl top nodes: %v", err)
		}
		if r, err := topRows(out); err != nil || len(r) != 2 {
			t.Errorf("edgeplane kubectl top nodes: %v:\n%s", err, out)
		}
	})

	t.Run("kubectl top pods -A", func(t *testing.T) {
		var want []string
		var last error // eventually reports the last error, which may be its own deadline's
		defer func() {
			if t.Failed() {
				t.Logf("last check of the table: %v", last)
			}
		}()
		eventually(t, 2*time.Minute, "kubectl top pods -A listing every running pod", func(ctx context.Context) (bool, error) {
			pods, err := s.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			want = want[:0]
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					want = append(want, p.Namespace+"/"+p.Name)
				}
			}
			out, err := topTable("kubectl", "--kubeconfig", s.kubeconfig, "top", "pods", "-A")
			if err != nil {
				return false, err
			}
			rows, err := topRows(out)
			if err != nil {
				return false, err
			}
			// kubectl rounds memory to Mi (a busybox loop is "0Mi") and CPU
			// to millicores: the figures are checked below, in the API.
			var missing []string
			for _, p := range want {
				if _, ok := rows[p]; !ok {
					missing = append(missing, p)
				}
			}
			last = fmt.Errorf("missing %v in:\n%s", missing, out)
			return len(missing) == 0, last
		})
		sort.Strings(want)
		t.Logf("pods with figures: %v", want)
		// kubectl rounds CPU to millicores; the API's nanocores are above
		// zero for every pod (each does some work).
		list, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			for _, ctr := range p.Containers {
				cpu, mem := ctr.Usage[corev1.ResourceCPU], ctr.Usage[corev1.ResourceMemory]
				if cpu.IsZero() || mem.IsZero() {
					t.Errorf("%s/%s container %s: CPU %s, memory %s: want both above zero", p.Namespace, p.Name, ctr.Name, cpu.String(), mem.String())
				}
			}
		}
	})

	t.Run("HorizontalPodAutoscaler", func(t *testing.T) { checkHPA(t, c) })

	t.Run("a chart with a claim, an Ingress and an HPA, on a cluster made with no flags", func(t *testing.T) { checkApplicationChart(t, c) })

	t.Run("a kubelet certificate from another CA is refused", func(t *testing.T) { checkRogueKubelet(t, c) })
}

// topTable runs a `kubectl top` command and returns its table (stdout:
// kubectl's warnings go to stderr, which is only shown when it fails).
func topTable(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// topRows parses a `kubectl top nodes|pods` table by its header: each
// row's name ("namespace/name" with a NAMESPACE column), CPU(cores) and
// MEMORY(bytes). The node table has percentage columns between them, and
// lists Nodes without figures as "<unknown>": those rows are left out.
func topRows(out string) (map[string][2]resource.Quantity, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := map[string]int{}
	for i, h := range strings.Fields(lines[0]) {
		col[h] = i
	}
	nameCol, hasName := col["NAME"]
	cpuCol, hasCPU := col["CPU(cores)"]
	memCol, hasMem := col["MEMORY(bytes)"]
	nsCol, hasNS := col["NAMESPACE"]
	if !hasName || !hasCPU || !hasMem {
		return nil, fmt.Errorf("no NAME, CPU(cores) and MEMORY(bytes) in the header %q", lines[0])
	}
	rows := map[string][2]resource.Quantity{}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) <= max(nameCol, cpuCol, memCol, nsCol) {
			return nil, fmt.Errorf("line %q", line)
		}
		if f[cpuCol] == "<unknown>" {
			continue
		}
		cpu, err := resource.ParseQuantity(f[cpuCol])
		if err != nil {
			return nil, fmt.Errorf("line %q: %v", line, err)
		}
		mem, err := resource.ParseQuantity(f[memCol])
		if err != nil {
			return nil, fmt.Errorf("line %q: %v", line, err)
		}
		name := f[nameCol]
		if hasNS {
			name = f[nsCol] + "/" + name
		}
		rows[name] = [2]resource.Quantity{cpu, mem}
	}
	return rows, nil
}

// checkHPA: a Deployment whose pods burn CPU (a loop, held to 50m by its
// limit, five times its 10m request) until /tmp/idle exists; an HPA at 50%
// CPU, with a memory target it never reaches, scales it to 2; once every
// pod idles it scales back to 1 (a 15 s scale-down window instead of 5
// minutes).
func checkHPA(t *testing.T, c *twoNodeCluster) {
	s := c.Server
	ctx := context.Background()
	labels := map[string]string{"app": "burn"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "burn", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "burn", Image: testimage.DefaultBusyboxName,
						Command: []string{"sh", "-c", "while [ ! -e /tmp/idle ]; do :; done; exec sleep 3600"},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("8Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
						},
					}},
				},
			},
		},
	}
	if _, err := s.client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runningPods(t, s, "burn", 1)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "burn", Namespace: "default"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "burn"},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    2,
			Metrics: []autoscalingv2.MetricSpec{
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceMemory,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: ptr.To(resource.MustParse("1Gi"))}}},
			},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp:   &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)},
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](15)},
			},
		},
	}
	if _, err := s.client.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	eventually(t, 5*time.Minute, "the HPA scaling burn to 2", func(ctx context.Context) (bool, error) {
		h, err := s.client.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burn", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return h.Status.DesiredReplicas >= 2, fmt.Errorf("status %s", hpaStatus(h))
	})
	t.Logf("scaled up after %s", time.Since(begin).Round(time.Second))
	h, err := s.client.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burn", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sawMemory bool
	for _, m := range h.Status.CurrentMetrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceMemory && m.Resource.Current.AverageValue != nil && !m.Resource.Current.AverageValue.IsZero() {
			sawMemory = true
		}
	}
	if !sawMemory {
		t.Errorf("the HPA has no memory figure: %s", hpaStatus(h))
	}

	// Idle every pod (those the scale-up started too), until it scales back.
	idled := map[string]bool{}
	begin = time.Now()
	eventually(t, 5*time.Minute, "the HPA scaling burn back to 1", func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=burn"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || idled[p.Name] {
				continue
			}
			if _, err := c.podExec(p.Name, "touch", "/tmp/idle"); err != nil {
				return false, err
			}
			idled[p.Name] = true
		}
		h, err := s.client.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burn", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		d, err := s.client.AppsV1().Deployments("default").Get(ctx, "burn", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(idled) >= 2 && *d.Spec.Replicas == 1, fmt.Errorf("deployment at %d, idled %v, HPA %s", *d.Spec.Replicas, idled, hpaStatus(h))
	})
	t.Logf("scaled down after %s", time.Since(begin).Round(time.Second))
	if err := s.client.AutoscalingV2().HorizontalPodAutoscalers("default").Delete(ctx, "burn", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if err := s.client.AppsV1().Deployments("default").Delete(ctx, "burn", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// hpaStatus says what the HPA sees, for failure messages.
func hpaStatus(h *autoscalingv2.HorizontalPodAutoscaler) string {
	var b strings.Builder
	fmt.Fprintf(&b, "replicas %d->%d", h.Status.CurrentReplicas, h.Status.DesiredReplicas)
	for _, m := range h.Status.CurrentMetrics {
		if m.Resource == nil {
			continue
		}
		cur := m.Resource.Current
		switch {
		case cur.AverageUtilization != nil:
			fmt.Fprintf(&b, ", %s %d%%", m.Resource.Name, *cur.AverageUtilization)
		case cur.AverageValue != nil:
			fmt.Fprintf(&b, ", %s %s", m.Resource.Name, cur.AverageValue.String())
		}
	}
	for _, cond := range h.Status.Conditions {
		fmt.Fprintf(&b, "; %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	return b.String()
}

// checkRogueKubelet registers a Node "rogue" whose kubelet endpoint, on
// the test host's bridge address, serves a certificate for that address
// from the cluster's server CA, with a valid resource metrics answer. The
// server refuses it during the handshake (the endpoint answers no request),
// logs why, and serves no figures for it.
func checkRogueKubelet(t *testing.T, c *twoNodeCluster) {
	s := c.Server
	ctx := context.Background()
	tlsDir := filepath.Join(s.dataDir, "tls")
	cert := certFromCA(t, filepath.Join(tlsDir, "server-ca.crt"), filepath.Join(tlsDir, "server-ca.key"), net.ParseIP(c.HostIP))
	l, err := tls.Listen("tcp", net.JoinHostPort(c.HostIP, "0"), &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var requests int
	var handshakes []string
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			requests++
			mu.Unlock()
			ms := time.Now().UnixMilli()
			fmt.Fprintf(w, "node_cpu_usage_seconds_total %d %d\nnode_memory_working_set_bytes 1e+09 %d\n", ms/1000, ms, ms)
		}),
		ErrorLog: log.New(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			handshakes = append(handshakes, strings.TrimSpace(string(p)))
			return len(p), nil
		}), "", 0),
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	port := int32(l.Addr().(*net.TCPAddr).Port)
	// Tainted: no pod is scheduled there (the DaemonSet's would).
	node, err := s.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rogue"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "test/rogue", Effect: corev1.TaintEffectNoSchedule}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.client.CoreV1().Nodes().Delete(context.Background(), "rogue", metav1.DeleteOptions{}) })
	// The controllers write the new Node too (taints, its pod CIDR): the
	// status goes on the latest version.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := s.client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status = corev1.NodeStatus{
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test", LastHeartbeatTime: metav1.Now()}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: c.HostIP}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}},
		}
		_, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the server's refused handshakes with rogue", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(handshakes) >= 2, nil // two rounds: figures would need two points
	})
	var logged bool
	for _, line := range strings.Split(s.output.String(), "\n") {
		if strings.Contains(line, "Cannot read the node's kubelet's resource metrics") && strings.Contains(line, `node="rogue"`) &&
			strings.Contains(line, "x509: certificate signed by unknown authority") {
			logged = true
		}
	}
	if !logged {
		t.Errorf("the server's log does not say why rogue is refused:\n%s", tail(s.output.String()))
	}
	mu.Lock()
	n, first := requests, handshakes[0]
	mu.Unlock()
	t.Logf("rogue: %s", first)
	if n != 0 {
		t.Errorf("the server sent %d requests to rogue: its certificate was accepted", n)
	}
	if m, err := metricsclient.NewForConfigOrDie(s.config).MetricsV1beta1().NodeMetricses().Get(ctx, "rogue", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("nodes.metrics.k8s.io rogue: %v, %v; want NotFound", m, err)
	}
	out, err := topTable("kubectl", "--kubeconfig", s.kubeconfig, "top", "nodes")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := topRows(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rows["rogue"]; ok {
		t.Errorf("kubectl top nodes has figures for rogue:\n%s", out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// certFromCA is a serving certificate for ip signed by the CA in caCert
// and caKey.
func certFromCA(t *testing.T, caCert, caKey string, ip net.IP) tls.Certificate {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caX509, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:rogue", Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caX509, key.Public(), ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// preMetricsCommit is main's last commit before the resource metrics API:
// its binary makes clusters without the APIService.
const preMetricsCommit = "7627a3e"

// TestMetricsServerUpgrade: a cluster made by the binary from before the
// resource metrics API gets it at its first start with this one, without
// its objects being touched; --disable=metrics-server removes it (404 for
// metrics.k8s.io); a user's own APIService of that name and the reader
// ClusterRole, made as upstream metrics-server's manifests make them, are
// left alone by both a start with the part and one without.
func TestMetricsServerUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an older edgeplane and runs servers")
	}
	parallel(t, 4*time.Minute)
	old := buildAt(t, preMetricsCommit)
	dataDir := t.TempDir()
	oldCmd := command(dataDir)
	oldCmd.Path, oldCmd.Args[0] = old, old
	s := startServerCmd(t, dataDir, oldCmd)
	ctx := context.Background()
	reg := apiregclient.NewForConfigOrDie(s.config)
	if _, err := reg.APIServices().Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the binary of %s has a metrics APIService (%v): not a cluster from before it", preMetricsCommit, err)
	}
	cm, err := s.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.stop()

	restart := func(args ...string) {
		t.Helper()
		s.stop()
		s = startServer(t, dataDir, args...)
		reg = apiregclient.NewForConfigOrDie(s.config)
	}
	s = startServer(t, dataDir)
	reg = apiregclient.NewForConfigOrDie(s.config)
	eventually(t, time.Minute, "the metrics APIService Available", func(ctx context.Context) (bool, error) {
		svc, err := reg.APIServices().Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range svc.Status.Conditions {
			if c.Type == apiregv1.Available {
				return c.Status == apiregv1.ConditionTrue, fmt.Errorf("%s: %s", c.Reason, c.Message)
			}
		}
		return false, fmt.Errorf("conditions %v", svc.Status.Conditions)
	})
	if out, err := s.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"); err != nil || !strings.Contains(out, `"kind":"NodeMetricsList"`) {
		t.Errorf("GET nodes.metrics.k8s.io: %v: %s", err, out)
	}
	if out, err := s.kubectl("api-resources", "--api-group=metrics.k8s.io", "--no-headers"); err != nil || !strings.Contains(out, "PodMetrics") {
		t.Errorf("kubectl api-resources: %v: %s", err, out)
	}
	got, err := s.client.CoreV1().ConfigMaps("default").Get(ctx, "mine", metav1.GetOptions{})
	if err != nil || got.ResourceVersion != cm.ResourceVersion {
		t.Errorf("the user's ConfigMap after the upgrade: %v (resourceVersion %s, was %s)", err, got.ResourceVersion, cm.ResourceVersion)
	}

	restart("--disable=metrics-server")
	eventually(t, time.Minute, "the metrics APIService and reader role gone", func(ctx context.Context) (bool, error) {
		_, err := reg.APIServices().Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("APIService: %v", err)
		}
		_, err = s.client.RbacV1().ClusterRoles().Get(ctx, "system:aggregated-metrics-reader", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Errorf("ClusterRole: %v", err)
	})
	if out, err := s.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("metrics.k8s.io with --disable=metrics-server: %v: %s", err, out)
	}

	// The user's own metrics-server objects, as its manifests make them.
	port := int32(443)
	userSvc, err := reg.APIServices().Create(ctx, &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io", Labels: map[string]string{"k8s-app": "metrics-server"}},
		Spec: apiregv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
			InsecureSkipTLSVerify: true, Service: &apiregv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server", Port: &port}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	userRole, err := s.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:aggregated-metrics-reader", Labels: map[string]string{"k8s-app": "metrics-server"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkUsers := func(when string) {
		t.Helper()
		svc, err := reg.APIServices().Get(ctx, userSvc.Name, metav1.GetOptions{})
		if err != nil || svc.UID != userSvc.UID || !equality.Semantic.DeepEqual(svc.Spec, userSvc.Spec) || !equality.Semantic.DeepEqual(svc.Labels, userSvc.Labels) {
			t.Errorf("%s: the user's APIService: %v %+v", when, err, svc)
		}
		role, err := s.client.RbacV1().ClusterRoles().Get(ctx, userRole.Name, metav1.GetOptions{})
		if err != nil || role.ResourceVersion != userRole.ResourceVersion {
			t.Errorf("%s: the user's ClusterRole: %v %+v", when, err, role)
		}
	}
	restart()
	wantText(t, s.output.String(), "The APIService v1beta1.metrics.k8s.io is not edgeplane's")
	checkUsers("started with the part")
	restart("--disable=metrics-server")
	checkUsers("started without the part")
}
