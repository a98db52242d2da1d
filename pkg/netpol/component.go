package netpol

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// ComponentName is the component's name, and its --disable name.
const ComponentName = "network-policy"

// Component runs the Controller on a node, as a node component. It works
// in the background; Ready waits for the first write of the table, and a
// controller that fails ends the component (Done, Err), and with it the
// node: a node that no longer enforces its policies must not look healthy.
// Stop leaves the table in place, so a restart does not open the pods to
// traffic the policies deny.
type Component struct {
	// Node is the Node's name.
	Node string
	// Kubeconfig holds the node's credentials.
	Kubeconfig string

	loop background.Loop
	component.Status
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

// Ready waits for the first write of the table.
func (c *Component) Ready(ctx context.Context) error { return c.WaitReady(ctx) }

// Stop ends the controller.
func (c *Component) Stop(ctx context.Context) error {
	return c.loop.Stop(ctx)
}

func (c *Component) run(ctx context.Context) {
	client, err := kubeclient.New(c.Kubeconfig, ComponentName, kubeclient.Steady)
	if err != nil {
		c.End(fmt.Errorf("NetworkPolicy is not enforced on this node: %w", err))
		return
	}
	ctrl, err := New(Options{Client: client, NodeName: c.Node})
	if err != nil {
		c.End(fmt.Errorf("NetworkPolicy is not enforced on this node: %w", err))
		return
	}
	go func() {
		select {
		case <-ctrl.Synced():
			c.MarkReady()
		case <-ctx.Done():
		}
	}()
	err = ctrl.Run(ctx)
	if ctx.Err() == nil {
		if err == nil {
			err = component.ErrEndedOnItsOwn
		}
		c.End(fmt.Errorf("NetworkPolicy is no longer enforced on this node: %w", err))
	}
}
