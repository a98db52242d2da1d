package bootstrap

import (
	"context"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/pkg/helmcontroller"
	"github.com/edgeplane/edgeplane/pkg/manifests"
	"github.com/edgeplane/edgeplane/pkg/servicelb"
)

// Components that --disable turns off besides the control plane's.
const (
	// componentCoreDNS is the packaged CoreDNS manifest.
	componentCoreDNS = manifests.CoreDNS
	// componentServiceLB is the in-process LoadBalancer controller.
	componentServiceLB = "servicelb"
	// componentHelmController is the in-process HelmChart controller.
	componentHelmController = helmcontroller.ComponentName
)

// manifestsDirName is the manifests directory under the data dir.
const manifestsDirName = "manifests"

// startAddons starts what the cluster gets besides the control plane: the
// manifests directory (packaged CoreDNS and the user's manifests, kept
// applied), the service load balancer and the helm-controller. --disable=coredns
// removes the packaged file and its objects; the directory itself always
// runs, for the user's manifests.
func (s *server) startAddons(ctx context.Context, o CompletedOptions) error {
	packaged, err := manifests.Packaged(manifests.Values{
		ClusterDNS:    o.ClusterDNS,
		ClusterDomain: o.ClusterDomain,
		CoreDNSImage:  o.CoreDNSImage,
	})
	if err != nil {
		return err
	}
	var disabled []string
	for _, name := range manifests.Names() {
		if o.Disabled[name] {
			disabled = append(disabled, name)
		}
	}
	mc, err := manifests.New(manifests.Options{
		Dir:        filepath.Join(o.DataDir, manifestsDirName),
		Kubeconfig: s.pki.AdminKubeconfig,
		Packaged:   packaged,
		Disabled:   disabled,
	})
	if err != nil {
		return err
	}
	parts := []component.Component{mc}
	if !o.Disabled[componentServiceLB] {
		lb, err := servicelb.New(servicelb.Options{Kubeconfig: s.pki.AdminKubeconfig, Informers: s.chain.Informers()})
		if err != nil {
			return err
		}
		parts = append(parts, lb)
	}
	if err := s.mgr.StartTogether(ctx, stopTimeout, parts...); err != nil {
		return err
	}
	if o.Disabled[componentHelmController] {
		return nil
	}
	hc, err := helmcontroller.New(helmcontroller.Options{Kubeconfig: s.pki.AdminKubeconfig})
	if err != nil {
		return err
	}
	if err := s.mgr.StartBackground(ctx, hc); err != nil {
		return err
	}
	// Start-up does not wait for the CRDs to be served (0.3-2 s on the
	// first start of a cluster). Once they are, the manifests directory is
	// checked again, so that a HelmChart file is applied then, not at the
	// next periodic check.
	logger := klog.FromContext(ctx)
	return s.mgr.StartBackground(ctx, background.NewTask("helm-controller-ready", func(taskCtx context.Context) {
		if err := hc.Ready(taskCtx); err == nil {
			mc.Trigger()
		} else if taskCtx.Err() == nil {
			logger.Error(err, "The helm-controller did not start: HelmCharts are not installed")
		}
	}))
}
