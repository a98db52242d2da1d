package resourcemetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
)

// TestMetricsAPI runs the part on the real API server chain against three
// kubelets: two with serving certificates from the kubelet-serving CA, and
// one ("rogue") whose certificate is from the server CA, the CA every
// client trusts for the API server (kubelets' CA before the kubelet-serving
// CA: the old hole). Through the aggregator, with the metrics clientset the
// HorizontalPodAutoscaler and kubectl top use, it checks the APIService,
// discovery, node and pod figures (rates over the window, the working
// set), selectors, tables, NotFound, authorization with the reader role,
// that the rogue kubelet is refused during the handshake and never asked,
// that a kubelet's figures for a pod on another node are dropped, and that
// Remove takes away edgeplane's objects and leaves a user's.
func TestMetricsAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server chain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var m *Server
	srv := testapiserver.StartWith(t, ctx, testapiserver.Options{APIs: func(pki *certs.PKI) ([]chain.APIInstaller, error) {
		var err error
		m, err = New(Options{
			Kubeconfig: pki.AdminKubeconfig, KubeletCAFile: pki.KubeletServingCABundle,
			KubeletClientCertFile: pki.APIServerKubeletClient.Cert, KubeletClientKeyFile: pki.APIServerKubeletClient.Key,
			AddressTypes: chain.KubeletAddressTypes, Resolution: time.Second,
		})
		return []chain.APIInstaller{m}, err
	}})
	pki := srv.PKI
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	mc := metricsclient.NewForConfigOrDie(cfg)
	reg := apiregclient.NewForConfigOrDie(cfg)

	// Kubelets: good-a and good-b from the kubelet-serving CA, rogue from
	// the server CA. good-a also claims figures for pods pb and pc, which
	// run on good-b, with 5 cores; good-b reports pb only.
	dir := t.TempDir()
	serving := func(node string) (string, string) {
		c, k, err := certs.EnsureNodeServing(ctx, pki, node, nil, []net.IP{net.IPv4(127, 0, 0, 1)}, dir+"/"+node)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	ca, ka := serving("good-a")
	a := startFakeKubelet(t, ca, ka, pki.ClientCA.Cert, &fakeKubelet{nodeCores: 0.25, nodeMem: 512 << 20, containers: []fakeContainer{
		{"default", "pa", "c2", 0.05, 20 << 20}, {"default", "pa", "c1", 0.1, 10 << 20},
		{"team", "pb", "db", 5, 1 << 30}, {"team", "pc", "c", 5, 1 << 30},
	}})
	cb, kb := serving("good-b")
	b := startFakeKubelet(t, cb, kb, pki.ClientCA.Cert, &fakeKubelet{nodeCores: 0.5, nodeMem: 1 << 30, containers: []fakeContainer{
		{"team", "pb", "db", 0.2, 64 << 20},
	}})
	cr, kr := signedBy(t, pki.ServerCA.Cert, pki.ServerCA.Key, dir, "rogue")
	rogue := startFakeKubelet(t, cr, kr, pki.ClientCA.Cert, &fakeKubelet{nodeCores: 1, nodeMem: 1 << 20, containers: []fakeContainer{
		{"default", "pr", "c", 1, 1 << 20},
	}})
	for name, k := range map[string]*fakeKubelet{"good-a": a, "good-b": b, "rogue": rogue} {
		createNode(t, ctx, client, name, k.port())
	}
	for _, ns := range []string{"team"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createPod(t, ctx, client, "default", "pa", "good-a", map[string]string{"app": "web"}, "c1", "c2")
	createPod(t, ctx, client, "team", "pb", "good-b", map[string]string{"app": "db"}, "db")
	createPod(t, ctx, client, "team", "pc", "good-b", map[string]string{"app": "db"}, "c")
	createPod(t, ctx, client, "default", "pr", "rogue", map[string]string{"app": "web"}, "c")

	// A user's ClusterRole of the reader's name, made before the part
	// starts: it is left as it is.
	userRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ReaderRoleName, Labels: map[string]string{"owner": "user"}}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, userRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := m.Ready(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("APIService", func(t *testing.T) {
		svc, err := reg.APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Service != nil || svc.Spec.Group != "metrics.k8s.io" || svc.Spec.Version != "v1beta1" || !ours(svc.Labels) {
			t.Errorf("APIService %+v %v, want a local one for metrics.k8s.io/v1beta1, edgeplane's", svc.Spec, svc.Labels)
		}
		poll(t, ctx, "the APIService Available", func() (bool, error) {
			svc, err := reg.APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range svc.Status.Conditions {
				if c.Type == apiregv1.Available {
					return c.Status == apiregv1.ConditionTrue, fmt.Errorf("%s: %s", c.Reason, c.Message)
				}
			}
			return false, fmt.Errorf("no Available condition")
		})
		role, err := client.RbacV1().ClusterRoles().Get(ctx, ReaderRoleName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ours(role.Labels) || role.Labels["owner"] != "user" || len(role.Rules) != 0 {
			t.Errorf("the user's ClusterRole %s was changed: %v %v", ReaderRoleName, role.Labels, role.Rules)
		}
	})

	t.Run("discovery", func(t *testing.T) {
		dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
		groups, err := dc.ServerGroups()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range groups.Groups {
			if g.Name == "metrics.k8s.io" {
				if g.PreferredVersion.Version != "v1beta1" {
					t.Errorf("metrics.k8s.io prefers %s", g.PreferredVersion.Version)
				}
				return
			}
		}
		t.Error("discovery lists no metrics.k8s.io")
	})

	t.Run("OpenAPI v3", func(t *testing.T) {
		body, err := client.CoreV1().RESTClient().Get().AbsPath("/openapi/v3").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), `"apis/metrics.k8s.io/v1beta1"`) {
			t.Fatalf("/openapi/v3 does not list metrics.k8s.io/v1beta1: %.300s", body)
		}
		body, err = client.CoreV1().RESTClient().Get().AbsPath("/openapi/v3/apis/metrics.k8s.io/v1beta1").DoRaw(ctx)
		if err != nil || !strings.Contains(string(body), "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics") {
			t.Errorf("/openapi/v3/apis/metrics.k8s.io/v1beta1: %v: %.300s", err, body)
		}
	})

	var nodes *metricsv1beta1.NodeMetricsList
	poll(t, ctx, "both good nodes' figures", func() (bool, error) {
		nodes, err = mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(nodes.Items) == 2, fmt.Errorf("%d nodes", len(nodes.Items))
	})
	t.Run("nodes", func(t *testing.T) {
		want := map[string]struct{ milli, mem int64 }{"good-a": {250, 512 << 20}, "good-b": {500, 1 << 30}}
		for i, n := range nodes.Items {
			if w := []string{"good-a", "good-b"}[i]; n.Name != w {
				t.Errorf("item %d is %s, want %s (sorted)", i, n.Name, w)
			}
			checkUsage(t, n.Name, n.Usage, want[n.Name].milli, want[n.Name].mem)
			if n.Window.Duration < 500*time.Millisecond || n.Window.Duration > 10*time.Second {
				t.Errorf("%s: window %s", n.Name, n.Window.Duration)
			}
			if age := time.Since(n.Timestamp.Time); age < 0 || age > 30*time.Second {
				t.Errorf("%s: timestamp %s is %s old", n.Name, n.Timestamp, age)
			}
			if n.Labels["kubernetes.io/hostname"] != n.Name {
				t.Errorf("%s: labels %v, want the node's", n.Name, n.Labels)
			}
		}
		_, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, "rogue", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `nodemetrics.metrics.k8s.io "rogue" not found`) {
			t.Errorf("rogue's figures: %v, want NotFound", err)
		}
		one, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, "good-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkUsage(t, "good-b", one.Usage, 500, 1<<30)
		sel, err := mc.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/hostname=good-a"})
		if err != nil || len(sel.Items) != 1 || sel.Items[0].Name != "good-a" {
			t.Errorf("label selector: %v, %+v", err, sel)
		}
	})

	t.Run("the rogue kubelet is refused", func(t *testing.T) {
		poll(t, ctx, "the rogue kubelet's refused handshake", func() (bool, error) {
			_, _, hs := rogue.seen()
			return len(hs) > 0, nil
		})
		requests, _, hs := rogue.seen()
		if requests != 0 {
			t.Errorf("the rogue kubelet answered %d requests: its certificate was accepted", requests)
		}
		t.Logf("rogue kubelet: %s", hs[0])
		for _, k := range []*fakeKubelet{a, b} {
			requests, clients, _ := k.seen()
			if requests == 0 || slices.ContainsFunc(clients, func(cn string) bool { return cn != "kube-apiserver-kubelet-client" }) {
				t.Errorf("a good kubelet saw %d requests from %v, want the API server's kubelet client", requests, clients)
			}
		}
	})

	t.Run("pods", func(t *testing.T) {
		var all *metricsv1beta1.PodMetricsList
		poll(t, ctx, "both good pods' figures", func() (bool, error) {
			all, err = mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			return len(all.Items) == 2, fmt.Errorf("%d pods", len(all.Items))
		})
		if all.Items[0].Name != "pa" || all.Items[1].Name != "pb" {
			t.Fatalf("pods %s/%s, %s/%s, want default/pa, team/pb", all.Items[0].Namespace, all.Items[0].Name, all.Items[1].Namespace, all.Items[1].Name)
		}
		pa := all.Items[0]
		if len(pa.Containers) != 2 || pa.Containers[0].Name != "c1" || pa.Containers[1].Name != "c2" {
			t.Fatalf("pa's containers %+v, want c1, c2 (the pod's order)", pa.Containers)
		}
		checkUsage(t, "pa/c1", pa.Containers[0].Usage, 100, 10<<20)
		checkUsage(t, "pa/c2", pa.Containers[1].Usage, 50, 20<<20)
		if pa.Labels["app"] != "web" {
			t.Errorf("pa's labels %v", pa.Labels)
		}
		// good-a's 5 cores for pb and pc are not believed: they run on good-b.
		checkUsage(t, "pb/db", all.Items[1].Containers[0].Usage, 200, 64<<20)
		if _, err := mc.MetricsV1beta1().PodMetricses("team").Get(ctx, "pc", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pc, which only another node's kubelet reports: %v, want NotFound", err)
		}

		web, err := mc.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(web.Items) != 1 || web.Items[0].Name != "pa" {
			t.Errorf("default, app=web: %v %+v, want pa (pr runs on the rogue node)", err, web)
		}
		none, err := mc.MetricsV1beta1().PodMetricses("team").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(none.Items) != 0 {
			t.Errorf("team, app=web: %v %+v, want none", err, none)
		}
		byName, err := mc.MetricsV1beta1().PodMetricses("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=pb"})
		if err != nil || len(byName.Items) != 1 || byName.Items[0].Namespace != "team" {
			t.Errorf("metadata.name=pb: %v %+v", err, byName)
		}
		_, err = mc.MetricsV1beta1().PodMetricses("default").Get(ctx, "pr", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `podmetrics.metrics.k8s.io "default/pr" not found`) {
			t.Errorf("pr: %v, want NotFound", err)
		}
	})

	t.Run("table", func(t *testing.T) {
		body, err := client.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var table metav1.Table
		if err := json.Unmarshal(body, &table); err != nil {
			t.Fatal(err)
		}
		var cols []string
		for _, c := range table.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		if strings.Join(cols, ",") != "Name,cpu,memory,Window" || len(table.Rows) != 1 || table.Rows[0].Cells[0] != "pa" || table.Rows[0].Cells[2] != "30Mi" {
			t.Errorf("table %v %+v, want pa with 30Mi (its containers' sum)", cols, table.Rows)
		}
	})

	t.Run("authorization", func(t *testing.T) {
		as := func(user string) *metricsclient.Clientset {
			c := rest.CopyConfig(cfg)
			c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
			return metricsclient.NewForConfigOrDie(c)
		}
		if _, err := as("nobody").MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("a user without rights lists pod figures: %v, want Forbidden", err)
		}
		// edgeplane's reader role (the user's was taken away first).
		if err := client.RbacV1().ClusterRoles().Delete(ctx, ReaderRoleName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := Ensure(ctx, client, reg); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "default"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ReaderRoleName},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "reader"}},
		}
		if _, err := client.RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		reader := as("reader")
		poll(t, ctx, "the reader lists default's pod figures", func() (bool, error) {
			l, err := reader.MetricsV1beta1().PodMetricses("default").List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 1, err
		})
		if _, err := reader.MetricsV1beta1().PodMetricses("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the reader of default lists team's pods: %v, want Forbidden", err)
		}
		if _, err := reader.MetricsV1beta1().NodeMetricses().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the reader of default lists nodes: %v, want Forbidden", err)
		}
	})

	t.Run("remove", func(t *testing.T) {
		if err := Remove(ctx, client, reg); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.APIServices().Get(ctx, APIServiceName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("APIService after Remove: %v", err)
		}
		if _, err := client.RbacV1().ClusterRoles().Get(ctx, ReaderRoleName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole after Remove: %v", err)
		}
		// A user's APIService of that name (their own metrics-server):
		// neither Ensure nor Remove touches it.
		port := int32(443)
		user := &apiregv1.APIService{
			ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
			Spec: apiregv1.APIServiceSpec{Group: "metrics.k8s.io", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
				InsecureSkipTLSVerify: true, Service: &apiregv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server", Port: &port}},
		}
		created, err := reg.APIServices().Create(ctx, user, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := Ensure(ctx, client, reg); err != nil {
			t.Fatal(err)
		}
		if err := Remove(ctx, client, reg); err != nil {
			t.Fatal(err)
		}
		got, err := reg.APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the user's APIService: %v", err)
		}
		// Its status is the aggregator's to write; its spec and labels are the user's.
		if !equality.Semantic.DeepEqual(got.Spec, created.Spec) || len(got.Labels) != 0 || got.UID != created.UID {
			t.Errorf("the user's APIService was changed: %+v %v", got.Spec, got.Labels)
		}
	})
}

// checkUsage checks a usage's CPU (to 2 millicores: the fake kubelet's
// clock is in milliseconds) and memory.
func checkUsage(t *testing.T, what string, u corev1.ResourceList, milli, mem int64) {
	t.Helper()
	cpu, m := u[corev1.ResourceCPU], u[corev1.ResourceMemory]
	if got := cpu.MilliValue(); got < milli-2 || got > milli+2 {
		t.Errorf("%s: CPU %s, want %dm", what, cpu.String(), milli)
	}
	if m.Value() != mem {
		t.Errorf("%s: memory %s, want %d", what, m.String(), mem)
	}
}

// poll waits (up to a minute) until cond holds, failing with its last error.
func poll(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// createNode makes a Ready Node whose kubelet listens on 127.0.0.1:port.
func createNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, port int32) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status = corev1.NodeStatus{
		Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test", LastHeartbeatTime: metav1.Now()}},
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPod makes a pod bound to node (no kubelet runs it).
func createPod(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name, node string, labels map[string]string, containers ...string) {
	t.Helper()
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
