package bootstrap

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/edgeplane/edgeplane/pkg/controllers"
)

// Components that --disable turns off.
const (
	componentControllerManager = "controller-manager"
	componentScheduler         = "scheduler"
)

var disableable = []string{componentControllerManager, componentScheduler}

// parseDisable turns repeatable, comma-separated --disable values into a set.
func parseDisable(values []string) (map[string]bool, []error) {
	set := map[string]bool{}
	var errs []error
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			switch {
			case name == "":
			case slices.Contains(disableable, name):
				set[name] = true
			default:
				errs = append(errs, fmt.Errorf("--disable %q is not one of: %s", name, strings.Join(disableable, ", ")))
			}
		}
	}
	return set, errs
}

// startControllers starts the controller-manager and the scheduler, unless
// disabled, once the API server is ready. Started after the chain, they are
// stopped before it.
func (s *server) startControllers(ctx context.Context, o CompletedOptions) error {
	opts := controllers.Options{
		PKI:               s.pki,
		ClusterCIDR:       o.ClusterCIDR,
		AllocateNodeCIDRs: o.AllocateNodeCIDRs,
		ServiceCIDR:       o.ServiceCIDR,
		// Servers that share a datastore elect one controller-manager and
		// one scheduler among them.
		LeaderElect: o.sharedDatastore(),
		MaxWorkers:  o.Profile.ControllerWorkers,
		Lean:        o.Profile.LeanControllers,
	}
	if !o.Disabled[componentControllerManager] {
		cm, err := controllers.NewControllerManager(opts)
		if err != nil {
			return err
		}
		if err := s.mgr.start(ctx, cm, stopTimeout); err != nil {
			return err
		}
		s.checks[componentControllerManager].attach(cm.Check)
	}
	if !o.Disabled[componentScheduler] {
		sched, err := controllers.NewScheduler(opts)
		if err != nil {
			return err
		}
		if err := s.mgr.start(ctx, sched, stopTimeout); err != nil {
			return err
		}
		s.checks[componentScheduler].attach(sched.Check)
	}
	return nil
}
