package bootstrap

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/ingress"
)

// componentIngress is the in-process Ingress controller; the packaged
// manifest of the same name (its IngressClass and Service) goes with it.
const componentIngress = ingress.ComponentName

// startIngress runs the Ingress controller when this server is its own
// node (the proxy reaches pods through the node's pod network), in the
// background: the server is ready without waiting for it. With
// --disable=ingress it removes what the controller made instead (the
// manifests directory removes the packaged manifest's objects).
func (s *server) startIngress(ctx context.Context, o CompletedOptions) error {
	logger := klog.FromContext(ctx)
	admin, err := s.adminClient("ingress-setup")
	if err != nil {
		return err
	}
	if o.Disabled[componentIngress] {
		return s.mgr.StartBackground(ctx, background.NewTask("ingress-cleanup", func(ctx context.Context) {
			if err := kubeclient.Retry(ctx, "removing what the ingress controller made", 0, func(ctx context.Context) error {
				return ingress.Cleanup(ctx, admin)
			}); err != nil && ctx.Err() == nil {
				logger.Error(err, "Ingress is disabled, but what its controller made stays")
			}
		}))
	}
	if len(s.nodeIPs) == 0 {
		logger.V(1).Info("This server is not a node: it serves no Ingress (the proxy reaches pods through the node's pod network)")
		return nil
	}
	if err := kubeclient.Retry(ctx, "granting the ingress controller its roles", startupRetry, func(ctx context.Context) error {
		return ingress.EnsureRBAC(ctx, admin)
	}); err != nil {
		return err
	}
	c, err := ingress.New(ingress.Options{Kubeconfig: s.pki.AdminKubeconfig, NodeName: o.Node.Name, NodeIPs: s.nodeIPs})
	if err != nil {
		return err
	}
	return s.mgr.StartBackground(ctx, c)
}
