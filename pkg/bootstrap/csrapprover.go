package bootstrap

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
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
	admin, err := adminClient(a.adminKubeconfig)
	if err != nil {
		return err
	}
	if err := csrapprover.EnsureRBAC(ctx, admin, csrApproverUser); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", componentCSRApprover, err)
	}
	cfg.UserAgent = "edgeplane/" + componentCSRApprover
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", componentCSRApprover, err)
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
