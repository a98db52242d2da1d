package bootstrap

import (
	"context"
	"net/http"

	"github.com/edgeplane/edgeplane/internal/component"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// Components that --disable turns off.
const (
	componentControllerManager = "controller-manager"
	componentScheduler         = "scheduler"
)

// controllerOptions are the controller-manager's and the scheduler's options.
func (o CompletedOptions) controllerOptions(pki *certs.PKI) controllers.Options {
	return controllers.Options{
		PKI:               pki,
		ClusterCIDR:       o.ClusterCIDR,
		AllocateNodeCIDRs: o.AllocateNodeCIDRs,
		ServiceCIDR:       o.ServiceCIDR,
		// Servers that share a datastore elect one controller-manager and
		// one scheduler among them.
		LeaderElect: o.sharedDatastore(),
		MaxWorkers:  o.Profile.ControllerWorkers,
		Lean:        o.Profile.LeanControllers,

		NodeMonitorGracePeriod: nodeconfig.MonitorGracePeriod(o.NodeHeartbeat),
		LeafValidity:           o.Day2.LeafValidity,
	}
}

// startControllers starts the controller-manager and the scheduler, unless
// disabled, once the API server is ready. Neither needs the other, so they
// start together (started in turn, the scheduler would wait ~0.1 s behind
// the controller-manager's ~0.5-1 s). Started after the chain, they are stopped
// before it, the scheduler first.
func (s *server) startControllers(ctx context.Context, o CompletedOptions) error {
	opts := o.controllerOptions(s.pki)
	opts.Informers = s.chain.Informers()
	// healthChecked is a component that also reports its health to /readyz.
	type healthChecked interface {
		component.Component
		Check(*http.Request) error
	}
	var (
		names      []string // their keys in s.checks
		components []healthChecked
	)
	if !o.Disabled[componentControllerManager] {
		cm, err := controllers.NewControllerManager(opts)
		if err != nil {
			return err
		}
		names, components = append(names, componentControllerManager), append(components, cm)
	}
	if !o.Disabled[componentScheduler] {
		sched, err := controllers.NewScheduler(opts)
		if err != nil {
			return err
		}
		names, components = append(names, componentScheduler), append(components, sched)
	}
	if len(components) == 0 {
		return nil
	}
	start := make([]component.Component, len(components))
	for i, c := range components {
		start[i] = c
	}
	// The CSR approver needs the controller-manager to sign what it
	// approves, not to have started first: it starts with them (it took
	// 0.1 s of a warm restart after them).
	if !o.Disabled[componentControllerManager] {
		start = append(start, &approver{adminKubeconfig: s.pki.AdminKubeconfig, kubeconfig: s.pki.ControllerManagerKubeconfig,
			apiServer: o.approverAPIServer(), informers: s.chain.Informers()})
	}
	if err := s.mgr.StartTogether(ctx, stopTimeout, start...); err != nil {
		return err
	}
	health := map[string]func(*http.Request) error{}
	for i, c := range components {
		s.checks[names[i]].attach(c.Check)
		health[names[i]] = c.Check
	}
	// `kubectl get componentstatuses` probes their upstream health ports.
	return s.mgr.Start(ctx, newHealthEndpoints(s.pki.APIServerServing, health), stopTimeout)
}
