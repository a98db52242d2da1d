package bootstrap

import (
	"testing"
	"time"

	"github.com/edgeplane/edgeplane/pkg/node"
)

// TestNodeHeartbeatFlag: the kubelets' Lease and the node lifecycle
// controller's grace period follow --node-heartbeat together; bad values are
// refused naming the flag.
func TestNodeHeartbeatFlag(t *testing.T) {
	cases := []struct {
		name              string
		args              []string
		wantLease, wantGP time.Duration
		wantErr           string
	}{
		{name: "upstream's by default", wantLease: 40 * time.Second, wantGP: 50 * time.Second},
		{name: "every 30 s", args: []string{"--node-heartbeat=30s"}, wantLease: 2 * time.Minute, wantGP: 150 * time.Second},
		{name: "too often", args: []string{"--node-heartbeat=1s"}, wantErr: "--node-heartbeat 1s: want whole seconds"},
		{name: "not whole seconds", args: []string{"--node-heartbeat=7500ms"}, wantErr: "--node-heartbeat 7.5s"},
		{name: "too rare", args: []string{"--node-heartbeat=5m"}, wantErr: "--node-heartbeat 5m0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := validateArgs(t, tc.args)
			if tc.wantErr != "" {
				wantOneProblem(t, errs, tc.wantErr)
				return
			}
			if len(errs) != 0 {
				t.Fatalf("problems: %v", errs)
			}
			nc := c.nodeSettings()
			k := node.Config{Settings: c.Node}.KubeletOptions(node.PathsIn("/d"), node.Cluster{Config: nc, ClientCAFile: "/ca"})
			if nc.NodeLeaseDuration != tc.wantLease || k.NodeLeaseDuration != tc.wantLease {
				t.Errorf("node lease %s (kubelet %s), want %s", nc.NodeLeaseDuration, k.NodeLeaseDuration, tc.wantLease)
			}
			if gp := c.controllerOptions(nil).NodeMonitorGracePeriod; gp != tc.wantGP {
				t.Errorf("node monitor grace period %s, want %s", gp, tc.wantGP)
			}
		})
	}
}
