package logfilter

// The modules of nodeNoise's sources.
const (
	kubernetes = "k8s.io/kubernetes"
	criClient  = "k8s.io/cri-client"
	streaming  = "k8s.io/streaming"
	flannel    = "github.com/flannel-io/flannel"
)

// nodeNoise lists what a node's upstream components (kubelet v1.37.2,
// kube-proxy, flannel v0.28.10) print as errors at every healthy start,
// stop or `kubectl exec`, which asks nothing of the user. Each names the
// statement that prints it: TestCanaryNoiseSources fails once it is gone.
// A line that tells of a real delay stays: "Node not becoming ready in time
// after startup" (for one, when the CSINode attempts below have run out
// before the Node was registered, the next comes two minutes later).
var nodeNoise = []noiseEntry{
	// The kubelet registers its Node only once its runtime-dependent
	// modules have started (cAdvisor, the container manager: seconds on a
	// small board), while its loops look the Node up, three of them every
	// 100 ms, and log each miss.
	{
		text:   "Unable to register mirror pod because node is not registered yet",
		why:    "the kubelet polls for its own Node until it has registered it",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet.go", `logger.Error(err, "Unable to register mirror pod because node is not registered yet"`},
	},
	{
		text: "Error getting the current node from lister", and: "not found",
		why:    "the kubelet polls for its own Node until it has registered it",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet_node_status.go", `logger.Error(err, "Error getting the current node from lister")`},
	},
	{
		text: "Failed to get node when trying to set owner ref to the node lease", and: "not found",
		why:    "the node's Lease is written before the Node is registered, and gets its owner later",
		source: upstreamSource{kubernetes, "pkg/kubelet/util/nodelease.go", `logger.Error(err, "Failed to get node when trying to set owner ref to the node lease"`},
	},
	{
		text: "Error updating node status, will retry", and: "not found",
		why:    "the kubelet's first status update after it registered reads a Node informer that has not seen the Node yet, and retries",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet_node_status.go", `logger.Error(err, "Error updating node status, will retry")`},
	},
	{
		text: "Failed to initialize CSINode: ", and: "not found",
		why:    "the CSI plugin retries (30 ms to 2 min apart) until the Node is registered",
		source: upstreamSource{kubernetes, "pkg/volume/csi/csi_plugin.go", `klog.Errorf("Failed to initialize CSINode: %v", err)`},
	},
	{
		text: `"Eviction manager: failed to get summary stats" err="failed to get node info: `, and: "not found",
		why:    "the eviction manager asks for the Node before it is registered, and again 10 s later",
		source: upstreamSource{kubernetes, "pkg/kubelet/eviction/eviction_manager.go", `logger.Error(err, "Eviction manager: failed to get summary stats")`},
	},
	// Once at start.
	{
		text: "Skipping pod synchronization", and: "may not have completed yet",
		why:    "the kubelet's first runtime status check has not run yet",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet.go", `logger.Error(err, "Skipping pod synchronization")`},
	},
	{
		text:   `"Skipping pod synchronization" err="PLEG is not healthy: pleg has yet to be successful"`,
		why:    "the kubelet's runtime status check has run but its first pod lifecycle relist has not finished yet (a runtime slow to answer its first list); the next check, 100 ms later, passes",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet.go", `logger.Error(err, "Skipping pod synchronization")`},
	},
	{
		text:   "Image garbage collection failed once. Stats initialization may not have completed yet",
		why:    "the first image GC runs before the image filesystem's stats exist; repeated failures have a message of their own",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet.go", `logger.Error(err, "Image garbage collection failed once. Stats initialization may not have completed yet")`},
	},
	{
		text:   "eviction manager: failed to check if we have separate container filesystem. Ignoring.",
		why:    "a runtime that labels no image filesystem (containerd before 2.0): the eviction manager goes on without it",
		source: upstreamSource{kubernetes, "pkg/kubelet/eviction/eviction_manager.go", `logger.Error(splitErr, "eviction manager: failed to check if we have separate container filesystem. Ignoring.")`},
	},
	{
		text: "Failed to read data from checkpoint", and: "checkpoint is not found",
		why:    "a node's first start has no device manager checkpoint yet",
		source: upstreamSource{kubernetes, "pkg/kubelet/cm/devicemanager/manager.go", `logger.Error(err, "Failed to read data from checkpoint", "checkpoint", kubeletDeviceManagerCheckpoint)`},
	},
	{
		text: "RuntimeConfig from runtime service failed", and: "unknown method RuntimeConfig",
		why:    "containerd before 1.7 has no RuntimeConfig: the kubelet uses its configured cgroup driver, and edgeplane's start warns about the old containerd",
		source: upstreamSource{criClient, "pkg/remote_runtime.go", `logger.Error(err, "RuntimeConfig from runtime service failed")`},
	},
	{
		text: "Failed to list existing sets", and: "no such file or directory",
		why:    "kube-proxy's first nftables sync lists the sets of its table before it has created the table",
		source: upstreamSource{kubernetes, "pkg/proxy/nftables/proxier.go", `proxier.logger.Error(err, "Failed to list existing sets")`},
	},
	// At every `kubectl exec` (or attach) over WebSocket.
	{
		text: "Error on socket receive", and: "use of closed network connection",
		why:    "the kubelet's streaming server closes the connection once the command ends, and its read loop logs the close",
		source: upstreamSource{streaming, "pkg/httpstream/wsstream/conn.go", `logger.Error(err, "Error on socket receive")`},
	},
	// At a clean stop: the node's components see their context cancelled.
	{
		text:   "could not watch leases: context canceled",
		why:    "flannel's lease watch ends with the node",
		source: upstreamSource{flannel, "pkg/subnet/subnet.go", `log.Errorf("could not watch leases: %s", err)`},
	},
	{
		text: "GenericPLEG: Unable to retrieve pods", and: "context canceled",
		why:    "the kubelet's pod lifecycle loop meets its cancelled context until the process ends",
		source: upstreamSource{kubernetes, "pkg/kubelet/pleg/generic.go", `logger.Error(err, "GenericPLEG: Unable to retrieve pods")`},
	},
	{
		text: "Error listing containers", and: "context canceled",
		why:    "the kubelet's housekeeping meets its cancelled context until the process ends",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet_pods.go", `logger.Error(err, "Error listing containers")`},
	},
	{
		text: "Failed cleaning pods", and: "context canceled",
		why:    "the kubelet's housekeeping meets its cancelled context until the process ends",
		source: upstreamSource{kubernetes, "pkg/kubelet/kubelet.go", `logger.Error(err, "Failed cleaning pods")`},
	},
	{
		text: "ListPodSandbox with filter from runtime service failed", and: "context canceled",
		why:    "the kubelet's pod lifecycle loop meets its cancelled context until the process ends",
		source: upstreamSource{criClient, "pkg/remote_runtime.go", `logger.Error(err, "ListPodSandbox with filter from runtime service failed", "filter", filter)`},
	},
}
