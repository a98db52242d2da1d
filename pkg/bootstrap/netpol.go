package bootstrap

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/netpol"
)

// componentNetworkPolicy is the --disable name of the NetworkPolicy
// controller (pkg/netpol) of a node: a server's own and an agent's.
const componentNetworkPolicy = netpol.ComponentName

// agentDisableable are the components `edgeplane agent --disable` turns off.
var agentDisableable = []string{componentNetworkPolicy}

// grantNetworkPolicy lets every node read what its policy controller
// enforces (see netpol.Rules for why that is safe), unless the server has
// network policy turned off.
func (s *server) grantNetworkPolicy(ctx context.Context, o CompletedOptions) error {
	if o.Disabled[componentNetworkPolicy] {
		return nil
	}
	client, err := adminClient(s.pki.AdminKubeconfig)
	if err != nil {
		return err
	}
	return retryTransient(ctx, "granting nodes read access for NetworkPolicy", func(ctx context.Context) error {
		return netpol.EnsureRBAC(ctx, client)
	})
}

// networkPolicy is the node's policy controller, or, when disabled, nil
// after removing a table an earlier run left behind (it would otherwise go
// on enforcing the policies of the day it was written).
func networkPolicy(ctx context.Context, disabled bool, node, kubeconfig string) Component {
	if !disabled {
		return &netpol.Component{Node: node, Kubeconfig: kubeconfig}
	}
	if err := netpol.Cleanup(ctx, nil); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the NetworkPolicy table of an earlier run")
	}
	return nil
}
