package logfilter

import (
	"bytes"
	"errors"
	goflag "flag"
	"strings"
	"sync"
	"testing"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

func TestKeep(t *testing.T) {
	const own, upstream = ownPrefix + "pkg/bootstrap.(*server).start", "k8s.io/apiserver/pkg/server.(*GenericAPIServer).InstallAPIGroups"
	for _, tc := range []struct {
		name, entry, caller string
		want                bool
	}{
		{"own info", "I1203 12:00:00.000000 1 run.go:1] edgeplane ready in 2.1 s\n", own, true},
		{"own warning", "W1203 12:00:00.000000 1 run.go:1] clock is behind\n", own, true},
		{"own entry that looks like noise", "W1203 12:00:00.000000 1 x.go:1] Skipping API x/v1 because it has no resources.\n", own, true},
		{"upstream info", "I1203 12:00:00.000000 1 shared_informer.go:1] Waiting for caches to sync\n", upstream, false},
		{"upstream warning", "W1203 12:00:00.000000 1 x.go:1] Use tokens from the TokenRequest API\n", upstream, true},
		{"upstream error", "E1203 12:00:00.000000 1 x.go:1] storage is gone\n", upstream, true},
		{"upstream fatal", "F1203 12:00:00.000000 1 x.go:1] cannot go on\n", upstream, true},
		{"upstream noise: skipped API", "W1203 12:00:00.000000 1 genericapiserver.go:798] Skipping API batch/v1beta1 because it has no resources.\n", upstream, false},
		{"upstream noise: stale endpoints", "E1203 12:00:00.000000 1 controller.go:95] Found stale data, removed previous endpoints on kubernetes service, apiserver didn't exit successfully previously\n", upstream, false},
		{"upstream noise: peer leases", "E1203 12:00:00.000000 1 peer_endpoint_lease.go:181] Unable to remove peer endpoint leases: StorageError: key not found, Code: 1\n", upstream, false},
		{"upstream noise: stale read of a ReplicaSet", "E1206 03:10:29.192031 1 replica_set.go:640] \"Unhandled Error\" err=\"sync \\\"kube-system/coredns-77ff47c8db\\\" failed with read version: 297 is not as new as written version: 305 for group resource replicasets.apps\"\n", "k8s.io/apimachinery/pkg/util/runtime.logError", false},
		{"upstream noise: watch stopped during its sync", "E1206 03:10:23.155673 1 watcher.go:458] failed to sync with latest state: context canceled\n", "k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).startWatching", false},
		{"upstream error: watch sync failed otherwise", "E1206 03:10:23.155673 1 watcher.go:458] failed to sync with latest state: etcdserver: request timed out\n", "k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).startWatching", true},
		{"upstream noise: the kubelet before its Node exists", "E1206 03:59:05.4 1 kubelet_node_status.go:396] \"Error getting the current node from lister\" err=\"node \\\"edge-run\\\" not found\" logger=\"edgeplane.kubelet\"\n", "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).fastNodeStatusUpdate", false},
		{"upstream error: the kubelet's lister fails otherwise", "E1206 03:59:05.4 1 kubelet_node_status.go:396] \"Error getting the current node from lister\" err=\"connection refused\"\n", "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).fastNodeStatusUpdate", true},
		{"upstream noise: pod sync before the first runtime check", "E1206 03:59:05.4 1 kubelet.go:2697] \"Skipping pod synchronization\" err=\"container runtime status check may not have completed yet\"\n", "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).syncLoop", false},
		{"upstream noise: pod sync before the first relist", "E1207 12:55:22.439225 1 kubelet.go:2697] \"Skipping pod synchronization\" err=\"PLEG is not healthy: pleg has yet to be successful\" logger=\"edgeplane.kubelet\"\n", "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).syncLoop", false},
		{"upstream error: pod sync before the first relist on a runtime that is down", "E1207 12:55:22.439225 1 kubelet.go:2697] \"Skipping pod synchronization\" err=\"[container runtime is down, PLEG is not healthy: pleg has yet to be successful]\"\n", "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).syncLoop", true},
		{"upstream error: pod sync on an unhealthy runtime", "E1206 03:59:05.4 1 kubelet.go:2697] \"Skipping pod synchronization\" err=\"PLEG is not healthy: pleg was last seen active 3m0s ago\"\n", "k8s.io/kubernetes/pkg/kubelet.(*Kubelet).syncLoop", true},
		{"upstream noise: CSINode before the Node exists", "E1206 04:14:03.4 1 csi_plugin.go:399] Failed to initialize CSINode: error updating CSINode annotation: timed out waiting for the condition; caused by: nodes \"edge-run\" not found\n", "k8s.io/kubernetes/pkg/volume/csi.initializeCSINode.func1", false},
		{"upstream fatal that contains noise", "F1206 04:16:03.4 1 csi_plugin.go:413] Failed to initialize CSINode: nodes \"edge-run\" not found\n", "k8s.io/kubernetes/pkg/volume/csi.initializeCSINode.func1", true},
		{"upstream noise: an informer stopped while it opens a watch", "E1206 04:50:15.912289 1 reflector.go:227] \"Failed to watch\" err=\"Get \\\"https://127.0.0.1:46479/api/v1/services?watch=true\\\": context canceled\" logger=\"UnhandledError\"\n", "k8s.io/client-go/tools/cache.DefaultWatchErrorHandler", false},
		{"upstream error: a watch refused", "E1206 04:50:15.912289 1 reflector.go:227] \"Failed to watch\" err=\"services is forbidden: User \\\"x\\\" cannot watch resource\" logger=\"UnhandledError\"\n", "k8s.io/client-go/tools/cache.DefaultWatchErrorHandler", true},
		{"upstream noise: a new Service's ClusterIP before the informer has its IPAddress", "E1206 04:51:53.155809 1 repairip.go:383] \"Unhandled Error\" err=\"the ClusterIP [IPv4]: 10.43.0.10 for Service kube-system/kube-dns is not allocated; repairing\" logger=\"UnhandledError\"\n", "k8s.io/apimachinery/pkg/util/runtime.logError", false},
		{"unknown caller info", "I1203 12:00:00.000000 1 x.go:1] hello\n", "", false},
		{"empty entry", "", upstream, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Keep([]byte(tc.entry), tc.caller); got != tc.want {
				t.Errorf("Keep(%q, %q) = %v, want %v", tc.entry, tc.caller, got, tc.want)
			}
		})
	}
}

// lockedBuffer is a klog output the test can read while klog writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestInstall runs the filter on klog itself: the entries come from this
// package (edgeplane's code) and from real upstream functions that log.
func TestInstall(t *testing.T) {
	fs := flagSet()
	for _, name := range []string{"v", "vmodule", "logtostderr", "one_output", "stderrthreshold"} {
		old := fs.Lookup(name).Value.String()
		t.Cleanup(func() { _ = fs.Set(name, old) })
	}
	t.Cleanup(func() { klog.SetOutput(nilWriter{}) })

	t.Run("-v 1 leaves klog alone", func(t *testing.T) {
		setFlag(t, fs, "v", "1")
		if f := Install(&lockedBuffer{}); f != nil {
			t.Fatal("Install at -v 1 returned a filter")
		}
		if got := fs.Lookup("logtostderr").Value.String(); got != "true" {
			t.Fatalf("logtostderr = %s after Install at -v 1, want true", got)
		}
	})

	t.Run("--vmodule leaves klog alone", func(t *testing.T) {
		setFlag(t, fs, "v", "0")
		setFlag(t, fs, "vmodule", "shared_informer=4")
		defer setFlag(t, fs, "vmodule", "")
		if f := Install(&lockedBuffer{}); f != nil {
			t.Fatal("Install with a --vmodule returned a filter")
		}
	})

	t.Run("-v 0 keeps edgeplane's lines and upstream's errors", func(t *testing.T) {
		setFlag(t, fs, "v", "0")
		out := &lockedBuffer{}
		f := Install(out)
		if f == nil {
			t.Fatal("Install at -v 0 returned no filter")
		}
		klog.Info("own info line")
		klog.Background().Info("own structured line", "key", "value")
		klog.Warning("own warning line")
		cache.WaitForNamedCacheSync("logfilter-test", make(chan struct{}), func() bool { return true })
		utilruntime.HandleError(errors.New("upstream error line"))
		klog.Flush()

		got := out.String()
		for _, want := range []string{"own info line", "own structured line", "own warning line", "upstream error line"} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q:\n%s", want, got)
			}
		}
		for _, unwanted := range []string{"Waiting for caches to sync", "Caches are synced"} {
			if strings.Contains(got, unwanted) {
				t.Errorf("output has upstream info %q:\n%s", unwanted, got)
			}
		}
		if n := strings.Count(got, "\n"); n != 4 {
			t.Errorf("%d lines written, want 4:\n%s", n, got)
		}
		if f.Dropped() != 2 {
			t.Errorf("Dropped() = %d, want 2 (the two cache-sync lines)", f.Dropped())
		}
	})
}

func setFlag(t *testing.T, fs *goflag.FlagSet, name, value string) {
	t.Helper()
	if err := fs.Set(name, value); err != nil {
		t.Fatalf("set %s=%s: %v", name, value, err)
	}
}

type nilWriter struct{}

func (nilWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestStoppingNoise: the kubelet's Lease loop's errors and a node's
// cancelled runtime calls are shown while the process runs (a real failure)
// and hidden once it stops (the API server stops with it; the stop cancels
// the calls); a runtime call failing otherwise is shown then too.
func TestStoppingNoise(t *testing.T) {
	for _, tc := range []struct {
		name, entry, caller string
		wantStopping        bool // kept while the process stops (always kept while it runs)
	}{
		{"a Lease renewal error", `E1206 05:06:27.241637   25292 controller.go:260] "Failed to update lease" err="connection refused"`,
			"k8s.io/component-helpers/apimachinery/lease.(*controller).backoffEnsureLease", false},
		// Seen at the stop of TestMakeRun's servers, one or another in each run.
		{"a node's runtime call cancelled: ListContainers", `E1207 19:16:29.421626 7387 remote_runtime.go:594] "ListContainers with filter from runtime service failed" err="rpc error: code = Canceled desc = context canceled" logger="edgeplane.kubelet" filter=""`,
			"k8s.io/cri-client/pkg.(*remoteRuntimeService).listContainersV1", false},
		{"a node's runtime call cancelled: Version", `E1207 20:13:20.338861 6208 remote_runtime.go:280] "Version from runtime service failed" err="rpc error: code = Canceled desc = context canceled" logger="edgeplane.kubelet"`,
			"k8s.io/cri-client/pkg.(*remoteRuntimeService).Version", false},
		{"a node's runtime call cancelled: log rotation", `E1207 20:12:35.959264 4625 container_log_manager.go:154] "Failed to rotate container logs" err="failed to list containers: rpc error: code = Canceled desc = context canceled" logger="edgeplane.kubelet"`,
			"k8s.io/kubernetes/pkg/kubelet/logs.(*containerLogManager).Start.func1", false},
		{"a node's runtime call failing otherwise", `E1207 20:13:20.338861 6208 remote_runtime.go:280] "Version from runtime service failed" err="rpc error: code = Unavailable desc = connection refused"`,
			"k8s.io/cri-client/pkg.(*remoteRuntimeService).Version", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer stopping.Store(false)
			stopping.Store(false)
			if !Keep([]byte(tc.entry), tc.caller) {
				t.Fatal("hidden while the process runs")
			}
			Stopping()
			if got := Keep([]byte(tc.entry), tc.caller); got != tc.wantStopping {
				t.Fatalf("kept while the process stops: %v, want %v", got, tc.wantStopping)
			}
		})
	}
}
