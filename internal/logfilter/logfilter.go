// Package logfilter keeps edgeplane's default log output (-v 0) to what a user
// reading the journal needs: edgeplane's own lines (its start-up timeline,
// warnings and errors) and the warnings and errors of the upstream components
// it runs. Upstream's info lines, hundreds at every start, are dropped unless
// the user raises the verbosity, and so are the few upstream warnings and
// errors listed in noise, which every healthy start prints.
//
// It works on klog's formatted output, without changing upstream code: klog
// writes each entry synchronously through the writer Install hands it, so the
// writer can tell the entry's severity from klog's header and who logged it
// from the call stack (the first frame outside klog and logr).
package logfilter

import (
	"bytes"
	goflag "flag"
	"io"
	"runtime"
	"strings"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// ownPrefix is the package path prefix of edgeplane's code.
const ownPrefix = "github.com/edgeplane/edgeplane/"

// noiseEntry is an upstream warning or error that asks nothing of the user:
// an entry that contains text (and also and, when set). source, when set,
// is the upstream statement that prints it, which
// TestCanaryNoiseSources finds in the pinned module.
type noiseEntry struct {
	text, and, why string
	source         upstreamSource
}

// upstreamSource is a logging statement in a module's file.
type upstreamSource struct {
	module, file, statement string
}

// matches reports whether entry is this noise.
func (n noiseEntry) matches(entry []byte) bool {
	return bytes.Contains(entry, []byte(n.text)) && (n.and == "" || bytes.Contains(entry, []byte(n.and)))
}

// allNoise is noise and the node's (nodenoise.go).
var allNoise = append(append([]noiseEntry(nil), noise...), nodeNoise...)

// noise lists upstream warnings and errors that every healthy start (or a
// clean stop) prints and that ask nothing of the user; they are shown from
// -v 1. Each entry is a substring of the message, with why it is noise.
var noise = []noiseEntry{
	{
		// k8s.io/apiserver/pkg/server/genericapiserver.go, once per
		// beta/alpha version that is disabled (~30 lines): the default.
		text: "because it has no resources.",
		why:  "a disabled beta or alpha API version, which is the default",
	},
	{
		// k8s.io/component-base/metrics/options.go (v0.37.2): Options.Apply
		// logs an error when no metric label allow-list is configured, by
		// manifest (this one) or by mapping (the next); the API server
		// applies its metrics options at every start (docs/RELIABILITY.md,
		// "Workarounds"; TestCanaryMetricsAllowListError).
		text: "The manifest file is empty, ignoring.",
		why:  "no metric label allow-list is configured, which is the default",
	},
	{
		text: "empty allow-list mapping supplied, ignoring.",
		why:  "no metric label allow-list is configured, which is the default",
	},
	{
		// k8s.io/kubernetes/pkg/controlplane/controller/kubernetesservice:
		// with the master-count endpoint reconciler, RemoveEndpoints always
		// succeeds, so every start claims an unclean exit (docs/RELIABILITY.md,
		// "Workarounds"; TestCanaryMasterCountStaleData).
		text: "Found stale data, removed previous endpoints on kubernetes service",
		why:  "printed at every start with the master-count endpoint reconciler",
	},
	{
		// k8s.io/apiserver/pkg/reconcilers/peer_endpoint_lease.go on stop,
		// when the peer-endpoint reconciler never ran (a single server turns
		// its hook off, pkg/chain/tune.go) and so wrote no lease to remove.
		text: "Unable to remove peer endpoint leases: StorageError: key not found",
		why:  "the lease was never written: a single server runs no peer-endpoint reconciler",
	},
	{
		// k8s.io/kubernetes/pkg/controller (v1.37.2, KEP-5647 stale
		// controller consistency): a controller whose informers have not
		// yet seen its own last write returns a ConsistencyError, which the
		// ReplicaSet controller's worker logs as an error before it
		// requeues; a new ReplicaSet meets it when its pods' events come
		// before its status update's (CoreDNS's at every first start;
		// TestCanaryReplicaSetConsistencyError).
		text: "is not as new as written version: ",
		why:  "a controller waits for its informer to see its own write, by design",
	},
	{
		// k8s.io/apiserver/pkg/storage/etcd3/watcher.go (v0.37.2): a
		// watch stopped while it reads the current state (a watch cache
		// stopped at start-up) logs its context's cancellation, which the
		// same watcher skips once the watch runs (logWatchChannelErr;
		// TestCanaryWatchSyncCanceled).
		text: "failed to sync with latest state: context canceled",
		why:  "a watch stopped by its owner, which the watcher logs nowhere else",
	},
	{
		// k8s.io/kubernetes/pkg/registry/core/service/ipallocator/controller
		// (v1.37.2): the ClusterIP repair controller looks a new Service's
		// IPAddress up in its informer, which may not have it yet; its own
		// create then finds it. A real repair also records a Warning Event
		// (ClusterIPNotAllocated) on the Service.
		text: "is not allocated; repairing",
		why:  "the repair controller sees a new Service before its informer has the IPAddress the Service's create wrote",
		source: upstreamSource{"k8s.io/kubernetes", "pkg/registry/core/service/ipallocator/controller/repairip.go",
			`runtime.HandleError(fmt.Errorf("the ClusterIP [%v]: %s for Service %s/%s is not allocated; repairing", family, ip, svc.Namespace, svc.Name))`},
	},
	{
		// k8s.io/client-go/tools/cache/reflector.go (v0.37.2): an informer
		// stopped while its reflector opens a watch (a component stopped
		// soon after it started) reports the cancelled request as a failed
		// watch.
		text: `"Failed to watch"`, and: "context canceled",
		why: "an informer stopped by its owner while it opened a watch",
		source: upstreamSource{"k8s.io/client-go", "tools/cache/reflector.go",
			`utilruntime.HandleErrorWithContext(ctx, err, "Failed to watch", "reflector", r.name, "type", r.typeDescription)`},
	},
}

// Filter is a klog output that drops what Keep rejects.
type Filter struct {
	out     io.Writer
	dropped atomic.Int64
}

// New returns a filter that writes kept entries to out.
func New(out io.Writer) *Filter { return &Filter{out: out} }

// Install makes klog write through a filter to out when klog's verbosity is
// 0 and no --vmodule is set; otherwise it leaves klog as it is and returns
// nil. Call it once,
// after the command line is parsed.
//
// klog writes straight to stderr when it logs to stderr; to see every entry
// the filter turns that off and takes klog's output itself, as one stream
// (one_output) with no copy to stderr (stderrthreshold above FATAL).
func Install(out io.Writer) *Filter {
	fs := flagSet()
	// At -v 1 or with a --vmodule, the user asked for upstream's info lines.
	if klog.V(1).Enabled() || fs.Lookup("vmodule").Value.String() != "" {
		return nil
	}
	f := New(out)
	for name, value := range map[string]string{"logtostderr": "false", "one_output": "true", "stderrthreshold": "4"} {
		if err := fs.Set(name, value); err != nil {
			klog.Background().Error(err, "Log filter not installed: klog refused a setting", "flag", name)
			return nil
		}
	}
	klog.SetOutput(f)
	return f
}

// flagSet gives access to klog's settings (its flags share one state).
func flagSet() *goflag.FlagSet {
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}

// Dropped counts the entries the filter held back.
func (f *Filter) Dropped() int64 { return f.dropped.Load() }

// Write is called by klog with one formatted entry ("Lmmdd hh:mm:ss.uuuuuu
// pid file:line] msg"), on the goroutine that logged it.
func (f *Filter) Write(p []byte) (int, error) {
	if !Keep(p, callerFunction()) {
		f.dropped.Add(1)
		return len(p), nil
	}
	return f.out.Write(p)
}

// Keep decides for one klog entry, given the function that logged it: every
// entry of edgeplane's code; upstream fatal entries; upstream warnings and
// errors except noise; no upstream info entry.
func Keep(entry []byte, caller string) bool {
	if strings.HasPrefix(caller, ownPrefix) {
		return true
	}
	if len(entry) == 0 || entry[0] == 'I' {
		return false
	}
	if entry[0] == 'F' { // never noise: the process ends
		return true
	}
	for _, n := range allNoise {
		if n.matches(entry) {
			return false
		}
	}
	if stopping.Load() {
		for _, n := range stoppingNoise {
			if n.matches(entry) {
				return false
			}
		}
	}
	return true
}

// callerFunction is the first function on the stack outside klog, logr,
// the runtime and this package: the one that logged.
func callerFunction() string {
	var pcs [48]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if !plumbing(fr.Function) {
			return fr.Function
		}
		if !more {
			return ""
		}
	}
}

// plumbing reports functions that only carry a log entry to klog's output.
func plumbing(fn string) bool {
	for _, p := range []string{"k8s.io/klog/", "github.com/go-logr/", "runtime.", ownPrefix + "internal/logfilter.(*Filter).", ownPrefix + "internal/logfilter.callerFunction"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}
