package nodeconfig

import (
	"fmt"
	"time"
)

// A node's heartbeat is its Lease renewal. The kubelet renews its Lease at a
// quarter of the Lease's duration (nodeLeaseRenewIntervalFraction), and the
// node lifecycle controller marks a node NotReady when no renewal came for its
// grace period: upstream's defaults are a 40 s Lease renewed every 10 s and a
// 50 s grace period. --node-heartbeat scales all three together, so a node
// still gets five heartbeats before it is NotReady.
const (
	// DefaultHeartbeat is upstream's: a renewal every 10 s.
	DefaultHeartbeat = 10 * time.Second
	// MinHeartbeat and MaxHeartbeat bound --node-heartbeat: renewals more
	// often than every 2 s cost writes for nothing; past 2 minutes a dead
	// node goes unnoticed for over 10 minutes.
	MinHeartbeat = 2 * time.Second
	MaxHeartbeat = 2 * time.Minute

	leaseDurationPerHeartbeat = 4
	gracePerHeartbeat         = 5
)

// LeaseDuration is the node Lease duration (KubeletConfiguration
// nodeLeaseDurationSeconds) whose renewals come every heartbeat.
func LeaseDuration(heartbeat time.Duration) time.Duration {
	return leaseDurationPerHeartbeat * heartbeat
}

// MonitorGracePeriod is the node lifecycle controller's grace period
// (--node-monitor-grace-period) for that heartbeat.
func MonitorGracePeriod(heartbeat time.Duration) time.Duration {
	return gracePerHeartbeat * heartbeat
}

// ValidateHeartbeat returns nil when heartbeat is a whole number of seconds
// in [MinHeartbeat, MaxHeartbeat].
func ValidateHeartbeat(heartbeat time.Duration) error {
	if heartbeat < MinHeartbeat || heartbeat > MaxHeartbeat || heartbeat%time.Second != 0 {
		return fmt.Errorf("--node-heartbeat %s: want whole seconds from %s to %s (nodes renew their Lease that often; a node is NotReady after %d missed renewals)",
			heartbeat, MinHeartbeat, MaxHeartbeat, gracePerHeartbeat)
	}
	return nil
}
