package bootstrap

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/csrapprover"
)

// componentCSRApprover decides kubelet serving certificate requests.
const componentCSRApprover = "csr-approver"

// csrApproverUser is the identity the approver works as: the
// controller-manager's client certificate, bound to the approver's role.
const csrApproverUser = "system:kube-controller-manager"

// approver runs the kubelet-serving CSR approver (pkg/csrapprover) as a
// component, next to the controller-manager's csrsigning controller, which
// signs what it approves.
type approver struct {
	adminKubeconfig string
	kubeconfig      string

	loop background.Loop
}

func (a *approver) Name() string { return componentCSRApprover }

// Start binds the approver's role and starts it in the background.
func (a *approver) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName(componentCSRApprover)
	admin, err := kubeclient.New(a.adminKubeconfig, componentCSRApprover+"-rbac", kubeclient.Burst)
	if err != nil {
		return err
	}
	if err := csrapprover.EnsureRBAC(ctx, admin, csrApproverUser); err != nil {
		return err
	}
	client, err := kubeclient.New(a.kubeconfig, componentCSRApprover, kubeclient.Steady)
	if err != nil {
		return err
	}
	c, err := csrapprover.New(client, csrapprover.Options{})
	if err != nil {
		return err
	}
	a.loop.Start(klog.NewContext(ctx, logger), func(runCtx context.Context) { c.Run(runCtx, 1) })
	return nil
}

// Ready is immediate: requests wait in the queue until the informer syncs.
func (a *approver) Ready(context.Context) error { return nil }

// Stop ends the approver and waits for it.
func (a *approver) Stop(ctx context.Context) error {
	return a.loop.Stop(ctx)
}
