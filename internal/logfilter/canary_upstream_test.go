package logfilter

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/util/consistency"
	"k8s.io/kubernetes/pkg/features"
)

// staleRV is an informer store that has seen resource version rv.
type staleRV string

func (s staleRV) LastStoreSyncResourceVersion() string { return string(s) }

// TestCanaryReplicaSetConsistencyError: the ReplicaSet controller of
// kubernetes v1.37.2 (StaleControllerConsistencyReplicaSet, on by default;
// KEP-5647) does not sync a ReplicaSet while its informers have not seen
// its own last write: it returns a ConsistencyError, which its worker logs
// as an error ("sync ... failed with read version: N is not as new as
// written version: M") before it requeues. Every new ReplicaSet meets it
// when its pods' events arrive before its own status update's (CoreDNS's at
// every first start). Once the controller stops logging it, this fails:
// drop the entry from noise.
func TestCanaryReplicaSetConsistencyError(t *testing.T) {
	if !utilfeature.DefaultFeatureGate.Enabled(features.StaleControllerConsistencyReplicaSet) {
		t.Fatal("StaleControllerConsistencyReplicaSet is off by default now: the ReplicaSet controller no longer reports stale reads; drop the entry from noise")
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-1", UID: "uid-1", ResourceVersion: "5"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: new(int32),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
		},
	}
	client := fake.NewClientset(rs)
	factory := informers.NewSharedInformerFactory(client, 0)
	rsGR := schema.GroupResource{Group: "apps", Resource: "replicasets"}
	store := consistency.NewConsistencyStore(map[schema.GroupResource]consistency.LastSyncRVGetter{rsGR: staleRV("5")})
	store.WroteAt(types.NamespacedName{Namespace: rs.Namespace, Name: rs.Name}, rs.UID, rsGR, "7")
	rsc := replicaset.NewBaseController(klog.Background(), factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), client, 10,
		appsv1.SchemeGroupVersion.WithKind("ReplicaSet"), "replicaset_controller", "replicaset",
		controller.RealPodControl{KubeClient: client, Recorder: record.NewFakeRecorder(10)},
		record.NewBroadcaster(), replicaset.DefaultReplicaSetControllerFeatures(), store)

	const want = "failed with read version: 5 is not as new as written version: 7"
	got := captureKlogLive(t, func(out *lockedBuffer) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		factory.Start(ctx.Done())
		done := make(chan struct{})
		go func() { defer close(done); rsc.Run(ctx, 1) }()
		_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			klog.Flush()
			return strings.Contains(out.String(), want), nil
		})
		cancel()
		<-done
		factory.Shutdown()
	})
	line := lineWith(got, want)
	if line == "" {
		t.Fatalf("the ReplicaSet controller no longer logs a stale read as an error (output %q): drop it from noise", got)
	}
	if !strings.HasPrefix(line, "E") || !inNoise(line) {
		t.Fatalf("the stale-read line %q is not an error in noise", line)
	}
}

// TestCanaryWatchSyncCanceled: apiserver v0.37.2's etcd3 watcher logs
// "failed to sync with latest state: context canceled" when a watch that
// starts with the current state (a watch cache's, at start-up) is stopped
// while it reads that state, although it logs nothing for the same
// cancellation once the watch runs (logWatchChannelErr skips cancel
// errors). Once the sync skips it too, this fails: drop the entry from noise.
func TestCanaryWatchSyncCanceled(t *testing.T) {
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.Name = "canary"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	peer := url.URL{Scheme: "http", Host: freeAddr(t)}
	client := url.URL{Scheme: "http", Host: freeAddr(t)}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd not ready after a minute")
	}

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codec := serializer.NewCodecFactory(scheme).LegacyCodec(corev1.SchemeGroupVersion)
	sc := storagebackend.NewDefaultConfig("/registry", codec)
	sc.Transport.ServerList = []string{client.String()}
	s, destroy, err := factory.Create(*sc.ForResource(schema.GroupResource{Resource: "configmaps"}),
		func() runtime.Object { return &corev1.ConfigMap{} }, func() runtime.Object { return &corev1.ConfigMapList{} }, "/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(destroy)

	const want = "failed to sync with latest state: context canceled"
	got := captureKlog(t, func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // stopped before the watch reads the current state
		w, err := s.Watch(ctx, "/configmaps/", storage.ListOptions{Predicate: storage.Everything, Recursive: true})
		if err != nil {
			t.Errorf("Watch: %v", err)
			return
		}
		for range w.ResultChan() { // closed once the watch has given up
		}
		w.Stop()
	})
	line := lineWith(got, want)
	if line == "" {
		t.Fatalf("a watch stopped while it reads the current state no longer logs %q (output %q): drop it from noise", want, got)
	}
	if !strings.HasPrefix(line, "E") || !inNoise(line) {
		t.Fatalf("%q is not an error in noise", line)
	}
}

// lineWith is the first line of out that contains s.
func lineWith(out, s string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// freeAddr is a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}
