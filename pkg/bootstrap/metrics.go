package bootstrap

import (
	"context"

	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/resourcemetrics"
)

// componentMetricsServer is the in-process resource metrics API (kubectl
// top, the HorizontalPodAutoscaler), under k3s's name.
const componentMetricsServer = resourcemetrics.Name

// newMetrics builds the resource metrics part, before the chain that
// serves its API; nil when --disable=metrics-server.
func (s *server) newMetrics(o CompletedOptions) error {
	if o.Disabled[componentMetricsServer] {
		return nil
	}
	m, err := resourcemetrics.New(resourcemetrics.Options{
		Kubeconfig:            s.pki.AdminKubeconfig,
		KubeletCAFile:         s.pki.KubeletServingCABundle,
		KubeletClientCertFile: s.pki.APIServerKubeletClient.Cert,
		KubeletClientKeyFile:  s.pki.APIServerKubeletClient.Key,
		AddressTypes:          chain.KubeletAddressTypes,
		Dial:                  s.tunnel.DialContext,
	})
	if err != nil {
		return err
	}
	s.metrics = m
	return nil
}

// apis are the API groups of edgeplane's own the chain serves.
func (s *server) apis() []chain.APIInstaller {
	var apis []chain.APIInstaller
	if s.metrics != nil {
		apis = append(apis, s.metrics)
	}
	return apis
}

// startMetrics starts the resource metrics part, or with
// --disable=metrics-server removes its APIService and reader role (a
// user's own APIService of that name stays).
func (s *server) startMetrics(ctx context.Context, o CompletedOptions) error {
	if s.metrics == nil {
		return resourcemetrics.RemoveWith(ctx, s.pki.AdminKubeconfig, startupRetry)
	}
	return s.mgr.Start(ctx, s.metrics, stopTimeout)
}
