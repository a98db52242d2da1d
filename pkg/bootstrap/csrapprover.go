package bootstrap

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/csrapprover"
)

// componentCSRApprover decides kubelet serving certificate requests and
// the client certificate requests of node tokens.
const componentCSRApprover = "csr-approver"

// csrApproverUser is the identity the approver works as: the
// controller-manager's client certificate, bound to the approver's role.
const csrApproverUser = "system:kube-controller-manager"

// approver runs the CSR approver (pkg/csrapprover) as a component, next
// to the controller-manager's csrsigning controller, which signs what it
// approves.
type approver struct {
	adminKubeconfig string
	kubeconfig      string
	// apiServer names the API server, which no node's serving certificate
	// may name.
	apiServer csrapprover.APIServer
	// informers is the API server's shared informer factory, which the
	// approver reads Nodes from (its approvals stay the controller-manager's).
	informers informers.SharedInformerFactory

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
	c, err := csrapprover.New(client, csrapprover.Options{APIServer: a.apiServer, Informers: a.informers})
	if err != nil {
		return err
	}
	a.loop.Start(klog.NewContext(ctx, logger), func(runCtx context.Context) { c.Run(runCtx, 1) })
	return nil
}

// approverAPIServer is what names this server's API server: what its
// serving certificate names (pkg/certs) and the kubernetes Service.
func (o CompletedOptions) approverAPIServer() csrapprover.APIServer {
	a := csrapprover.APIServer{
		ClusterDomain:    o.ClusterDomain,
		AdvertiseAddress: o.AdvertiseAddress,
		BindAddress:      o.BindAddress,
		Hostname:         o.Hostname,
		TLSSANs:          o.TLSSANs,
	}
	if o.ServiceCIDR != nil {
		if ip, err := netutils.GetIndexedIP(o.ServiceCIDR, 1); err == nil {
			a.ServiceIPs = append(a.ServiceIPs, ip)
		}
	}
	return a
}

// Ready is immediate: requests wait in the queue until the informer syncs.
func (a *approver) Ready(context.Context) error { return nil }

// Stop ends the approver and waits for it.
func (a *approver) Stop(ctx context.Context) error {
	return a.loop.Stop(ctx)
}
