package apicache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/internal/testing/testlink"
	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/certs"
)

// node is the test's node.
const node = "node-a"

// fixture is a real API server, a cuttable link to it, the node's endpoint
// and cache, and the node's credentials.
type fixture struct {
	srv      *testapiserver.Cluster
	admin    kubernetes.Interface
	link     *testlink.Link
	endpoint *apiendpoint.Endpoint
	cache    *Cache
	dir      string
	certFile string
}

func newFixture(t *testing.T, ctx context.Context) *fixture {
	t.Helper()
	c := testapiserver.StartCluster(t, ctx, testapiserver.MemberOptions{})
	f := &fixture{srv: c, admin: c.Client(t, 0), link: testlink.New(t, c.Members[0].Addr), dir: t.TempDir()}
	certDir := filepath.Join(f.dir, "pki")
	if _, err := certs.EnsureNodeClient(ctx, c.PKI, node, certDir, filepath.Join(f.dir, "node.kubeconfig"), "https://"+f.link.Addr()); err != nil {
		t.Fatal(err)
	}
	f.certFile = filepath.Join(certDir, "kubelet-client-current.pem")
	e, err := apiendpoint.New(apiendpoint.Config{
		Listen: "127.0.0.1:0", DialOnly: true, Server: f.link.Addr(), CAFile: c.PKI.ServerCA.Cert,
		CheckInterval: 200 * time.Millisecond, CheckTimeout: time.Second, DialTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	f.endpoint = e
	f.startCache(t, ctx)
	return f
}

// startCache starts (again) the node's cache on its directory.
func (f *fixture) startCache(t *testing.T, ctx context.Context) {
	t.Helper()
	c, err := New(Config{
		Node: node, Listen: "127.0.0.1:0", Dir: filepath.Join(f.dir, DirName), ClientCAFile: f.srv.PKI.ClientCA.Cert,
		ServerCAFile: f.srv.PKI.ServerCA.Cert, CertFile: f.certFile, Upstream: f.endpoint,
		FlushInterval: 100 * time.Millisecond, CheckInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	f.cache = c
}

// client is the node's client through the cache, as the kubelet makes it
// (protobuf preferred).
func (f *fixture) client(t *testing.T, certFile string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{
		Host: "https://" + f.cache.Address(),
		TLSClientConfig: rest.TLSClientConfig{
			// The CA's content, not its file: client-go keeps transports
			// by file name, and the cache makes a new CA at each start.
			CAData: mustRead(t, LocalCAFile(filepath.Join(f.dir, DirName))), CertFile: certFile, KeyFile: certFile,
		},
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf", AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json"},
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// objects creates what a node's parts read: its Node, a pod bound to it
// with a ConfigMap and a Secret, a Service's EndpointSlice pointing at the
// pod, and RBAC for nodes to read EndpointSlices (edgeplane grants it with
// the server's node RBAC).
func (f *fixture) objects(t *testing.T, ctx context.Context) *corev1.Pod {
	t.Helper()
	a := f.admin
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := a.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	must(err)
	_, err = a.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-a"}, Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	must(err)
	_, err = a.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret-a"}, Data: map[string][]byte{"k": []byte("s1")}}, metav1.CreateOptions{})
	must(err)
	_, err = a.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa-a"}}, metav1.CreateOptions{})
	must(err)
	pod, err := a.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-a", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: "sa-a", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes: []corev1.Volume{
				{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-a"}}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secret-a"}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				}}}},
			},
		},
	}, metav1.CreateOptions{})
	must(err)
	_, err = a.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.42.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName: ptr.To(node), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod.Name, UID: pod.UID},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = a.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-slices"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	must(err)
	_, err = a.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-node-slices"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-node-slices"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}, metav1.CreateOptions{})
	must(err)
	return pod
}

// tokenRequest is the kubelet's request for a pod's token.
func tokenRequest(pod *corev1.Pod) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3607),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
}

// TestOffline: what the node's parts read through the cache while a server
// answers is answered from the cache when the link is cut, from disk after
// the cache restarts, and the kubelet's pod status reaches the node's
// watches and EndpointSlices; writes are refused offline; when the link
// heals, held watches end and the parts see the server's changes.
func TestOffline(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	pod := f.objects(t, ctx)
	nc := f.client(t, f.certFile)

	// Online: the parts' reads, as the kubelet and kube-proxy make them.
	factory := informers.NewSharedInformerFactoryWithOptions(nc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		if o.FieldSelector == "" {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}
	}))
	pods := factory.Core().V1().Pods().Informer()
	sliceFactory := informers.NewSharedInformerFactory(nc, 0)
	slices := sliceFactory.Discovery().V1().EndpointSlices().Informer()
	infCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	factory.Start(infCtx.Done())
	sliceFactory.Start(infCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, slices.HasSynced) {
		t.Fatal("informers through the cache did not sync")
	}
	cm, err := nc.CoreV1().ConfigMaps("default").Get(ctx, "cm-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node reads its pod's ConfigMap through the cache: %v", err)
	}
	secretList, err := nc.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=secret-a"})
	if err != nil || len(secretList.Items) != 1 {
		t.Fatalf("the node lists its pod's Secret by name through the cache: %v (%d items)", err, len(secretList.Items))
	}
	tok, err := nc.CoreV1().ServiceAccounts("default").CreateToken(ctx, "sa-a", tokenRequest(pod), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the node asks for its pod's token through the cache: %v", err)
	}
	waitFlushed(t, ctx, f.cache)

	// Offline.
	f.link.Cut()
	eventually(t, ctx, "the cache to see no server answer", func() bool { return !f.endpoint.Online() })
	offline := f.client(t, f.certFile)
	list, err := offline.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil || len(list.Items) != 1 || list.Items[0].UID != pod.UID {
		t.Fatalf("offline, the node's pods from the cache: %v, %v; want %s", err, names(list), pod.Name)
	}
	if got, err := offline.CoreV1().ConfigMaps("default").Get(ctx, "cm-a", metav1.GetOptions{}); err != nil || got.Data["k"] != cm.Data["k"] {
		t.Fatalf("offline, the ConfigMap from the cache: %v, %v", err, got)
	}
	if got, err := offline.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=secret-a"}); err != nil || len(got.Items) != 1 || string(got.Items[0].Data["k"]) != "s1" {
		t.Fatalf("offline, the Secret from the cache: %v, %v", err, got)
	}
	if got, err := offline.CoreV1().ServiceAccounts("default").CreateToken(ctx, "sa-a", tokenRequest(pod), metav1.CreateOptions{}); err != nil || got.Status.Token != tok.Status.Token {
		t.Fatalf("offline, the pod's token from the cache: %v (same token: %v)", err, err == nil && got.Status.Token == tok.Status.Token)
	}
	if _, err := offline.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("offline, a write: %v, want 503", err)
	}
	if _, err := offline.CoreV1().ConfigMaps("default").Get(ctx, "never-read", metav1.GetOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("offline, an object never read: %v, want 503", err)
	}

	// The kubelet's pod status, after a restart offline: a new address.
	patch := []byte(`{"metadata":{"uid":"` + string(pod.UID) + `"},"status":{"podIP":"10.42.0.99","podIPs":[{"ip":"10.42.0.99"}],"conditions":[{"type":"Ready","status":"True"}]}}`)
	patched, err := offline.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil || patched.Status.PodIP != "10.42.0.99" {
		t.Fatalf("offline, the kubelet's pod status update: %v, %v", err, patched)
	}
	eventually(t, ctx, "the node's pod watch to see the pod's new address", func() bool {
		o, ok, _ := pods.GetStore().GetByKey("default/" + pod.Name)
		return ok && o.(*corev1.Pod).Status.PodIP == "10.42.0.99"
	})
	eventually(t, ctx, "the node's EndpointSlice watch to see the pod's new address", func() bool {
		o, ok, _ := slices.GetStore().GetByKey("default/web-x")
		return ok && len(o.(*discoveryv1.EndpointSlice).Endpoints) == 1 && o.(*discoveryv1.EndpointSlice).Endpoints[0].Addresses[0] == "10.42.0.99"
	})

	// The cache restarts with the link still cut: from disk.
	stopInformers()
	waitFlushed(t, ctx, f.cache)
	if err := f.cache.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.startCache(t, ctx)
	again := f.client(t, f.certFile)
	list, err = again.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil || len(list.Items) != 1 || list.Items[0].Status.PodIP != "10.42.0.99" {
		t.Fatalf("offline after a restart, the node's pods from disk: %v, %+v", err, list)
	}
	sl, err := again.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil || len(sl.Items) != 1 || sl.Items[0].Endpoints[0].Addresses[0] != "10.42.0.99" {
		t.Fatalf("offline after a restart, the EndpointSlices from disk: %v, %+v", err, sl)
	}
	// A watch list (client-go's default) from disk, held open.
	factory = informers.NewSharedInformerFactoryWithOptions(again, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	pods = factory.Core().V1().Pods().Informer()
	infCtx, stopInformers = context.WithCancel(ctx)
	defer stopInformers()
	factory.Start(infCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		t.Fatal("offline after a restart, a pod informer through the cache did not sync")
	}

	// A change on the server during the partition arrives once it heals.
	if _, err := f.admin.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"changed":"during-partition"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watch held offline ends once a server answers: the informer
	// sees the change within a few seconds (left to itself, client-go
	// would wait for the watch's timeout, minutes).
	f.link.Heal()
	healed := time.Now()
	eventually(t, ctx, "the node's pod informer to see the server's change after the link healed", func() bool {
		o, ok, _ := pods.GetStore().GetByKey("default/" + pod.Name)
		return ok && o.(*corev1.Pod).Labels["changed"] == "during-partition"
	})
	if took := time.Since(healed); took > 5*time.Second {
		t.Fatalf("the node's pod informer saw the server's change %v after the link healed: the watch held offline was not ended", took)
	}
	// A watch resuming from the resourceVersion the cache gave the pod
	// offline would miss the server's events below it: refused, the
	// client lists again.
	if w, err := again.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), ResourceVersion: patched.ResourceVersion,
	}); !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
		if w != nil {
			w.Stop()
		}
		t.Fatalf("a watch from the cache's own resourceVersion %s once a server answers: %v, want 410", patched.ResourceVersion, err)
	}
	if _, err := again.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "back"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, Namespace: "default"},
		Reason:         "Test", Source: corev1.EventSource{Host: node},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a write through the cache once a server answers: %v", err)
	}
}

// TestOnlyTheNode: the cache forwards with the node's credentials, so it
// takes no other client: not the cluster admin, not another node.
func TestOnlyTheNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx)
	otherDir := t.TempDir()
	if _, err := certs.EnsureNodeClient(ctx, f.srv.PKI, "node-b", otherDir, filepath.Join(otherDir, "kubeconfig"), "https://"+f.link.Addr()); err != nil {
		t.Fatal(err)
	}
	admin := filepath.Join(t.TempDir(), "admin.pem")
	adminPEM := append(mustRead(t, f.srv.PKI.Admin.Cert), mustRead(t, f.srv.PKI.Admin.Key)...)
	if err := os.WriteFile(admin, adminPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, certFile string
		refused        bool
	}{
		{"the node", f.certFile, false},
		{"another node", filepath.Join(otherDir, "kubelet-client-current.pem"), true},
		{"the cluster admin", admin, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.client(t, tc.certFile).CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			// Refused in the TLS handshake: no HTTP answer at all (the
			// client sees the alert, or a closed connection with TLS 1.3).
			var status apierrors.APIStatus
			refused := err != nil && !errors.As(err, &status)
			if tc.refused != refused {
				t.Fatalf("err %v; want refused %v", err, tc.refused)
			}
			if !tc.refused && err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("the node through the cache: %v", err)
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitFlushed waits until the cache has written everything it holds.
func waitFlushed(t *testing.T, ctx context.Context, c *Cache) {
	t.Helper()
	eventually(t, ctx, "the cache to write its changes", func() bool {
		c.store.mu.Lock()
		defer c.store.mu.Unlock()
		return len(c.store.pending) == 0
	})
}

func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func names(l *corev1.PodList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}
