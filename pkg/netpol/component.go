package netpol

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/pkg/cni"
)

// ComponentName is the component's name, and its --disable name.
const ComponentName = "network-policy"

// Component runs the Controller on a node, as a bootstrap component. Like
// the pod network writer it works in the background: the node's
// credentials may appear only after the kubelet's TLS bootstrap, so nothing
// waits for it at start-up. Stop leaves the table in place, so a restart
// does not open the pods to traffic the policies deny.
type Component struct {
	// Node is the Node's name.
	Node string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string

	loop background.Loop
}

// Name implements the bootstrap component contract.
func (c *Component) Name() string { return ComponentName }

// Start makes bridged traffic visible to the table's hooks and starts the
// controller in the background.
func (c *Component) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName(ComponentName)
	if err := EnableBridgeNetfilter(); err != nil {
		// Routed traffic (between nodes) is still filtered; say what is not.
		logger.Error(err, "Traffic between pods on the same bridge is not subject to NetworkPolicy")
	}
	c.loop.Start(klog.NewContext(ctx, logger), func(runCtx context.Context) { c.run(runCtx) })
	return nil
}

// Ready is immediate: see the type's comment.
func (c *Component) Ready(context.Context) error { return nil }

// Stop ends the controller.
func (c *Component) Stop(ctx context.Context) error {
	return c.loop.Stop(ctx)
}

func (c *Component) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	client, err := cni.WaitForClient(ctx, c.Kubeconfig, "edgeplane/"+ComponentName)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(err, "NetworkPolicy is not enforced on this node: no client from the node's kubeconfig")
		}
		return
	}
	ctrl, err := New(Options{Client: client, NodeName: c.Node})
	if err != nil {
		logger.Error(err, "NetworkPolicy is not enforced on this node")
		return
	}
	if err := ctrl.Run(ctx); err != nil && ctx.Err() == nil {
		logger.Error(err, "NetworkPolicy is not enforced on this node")
	}
}
