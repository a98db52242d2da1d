package logfilter

import "sync/atomic"

// stopping is set once the process has begun its shutdown.
var stopping atomic.Bool

// Stopping says the process has begun its shutdown: from then on the
// entries of stoppingNoise are noise too. pkg/bootstrap calls it first
// thing when a server or an agent stops.
func Stopping() { stopping.Store(true) }

// stoppingNoise is what upstream's loops that outlive their component by
// design print while the process stops: the API server they talk to stops
// with it (a server that is its own node) or the process exits a moment
// later (an agent).
var stoppingNoise = []noiseEntry{
	{
		// The gRPC status of a call the process cancelled: the kubelet's
		// loops (pod lifecycle, housekeeping, log rotation, the runtime's
		// version check, ...) each log a failed runtime call at error level,
		// and the calls in flight when the node stops fail so, whichever
		// they are at that moment.
		text: "code = Canceled desc = context canceled",
		why:  "a node's runtime call in flight when the node stops, cancelled by the stop",
	},
	{
		// k8s.io/kubernetes v1.37.2 pkg/kubelet/kubelet.go runs the node
		// Lease's renewal on context.Background ("so lease renewal can
		// continue during graceful shutdown"): a stopped kubelet's Lease
		// loop renews into the API server's own shutdown.
		text:   "Failed to update lease",
		why:    "the kubelet's Lease loop outlives the kubelet by design and meets the stopping API server",
		source: upstreamSource{"k8s.io/component-helpers", "apimachinery/lease/controller.go", `klog.FromContext(ctx).Error(err, "Failed to update lease")`},
	},
	{
		text:   "Will retry updating lease",
		why:    "the same Lease loop, after its retries",
		source: upstreamSource{"k8s.io/component-helpers", "apimachinery/lease/controller.go", `klog.FromContext(ctx).Error(err, "Will retry updating lease", "interval", c.renewInterval)`},
	},
	{
		text:   "Failed to ensure lease exists, will retry",
		why:    "the same Lease loop, when the Lease cannot be read",
		source: upstreamSource{"k8s.io/component-helpers", "apimachinery/lease/controller.go", `klog.FromContext(ctx).Error(err, "Failed to ensure lease exists, will retry", "interval", sleep)`},
	},
}
