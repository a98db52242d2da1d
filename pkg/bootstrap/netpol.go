package bootstrap

import (
	"context"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/netpol"
	"github.com/edgeplane/edgeplane/pkg/node"
)

// grantNetworkPolicy lets every node read what its policy controller
// enforces (see netpol.Rules for why that is safe), unless the server has
// network policy turned off.
func (s *server) grantNetworkPolicy(ctx context.Context, o CompletedOptions) error {
	if o.Disabled[node.PartNetworkPolicy] {
		return nil
	}
	client, err := s.adminClient("network-policy-rbac")
	if err != nil {
		return err
	}
	return kubeclient.Retry(ctx, "granting nodes read access for NetworkPolicy", startupRetry, func(ctx context.Context) error {
		return netpol.EnsureRBAC(ctx, client)
	})
}
