package bootstrap

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"k8s.io/apiserver/pkg/server/healthz"
)

// componentCheck is a /readyz check for a component that starts after the
// API server: it passes until the component is attached (the API server must
// become ready first), then reports the component's own health.
type componentCheck struct {
	name  string
	mu    sync.Mutex
	check func(*http.Request) error
}

var _ healthz.HealthChecker = (*componentCheck)(nil)

func (c *componentCheck) Name() string { return c.name }

func (c *componentCheck) Check(r *http.Request) error {
	c.mu.Lock()
	check := c.check
	c.mu.Unlock()
	if check == nil {
		return nil
	}
	return check(r)
}

// attach hands the check over to the started component.
func (c *componentCheck) attach(check func(*http.Request) error) {
	c.mu.Lock()
	c.check = check
	c.mu.Unlock()
}

// checkedComponents are the components /readyz reports on: the control
// plane's. A node's kubelet is not among them: a node problem must not make
// the API unready for every client.
var checkedComponents = []string{componentControllerManager, componentScheduler}

// componentChecks makes one check per in-process component that is enabled.
func componentChecks(o CompletedOptions) map[string]*componentCheck {
	checks := map[string]*componentCheck{}
	for _, name := range checkedComponents {
		if !o.Disabled[name] {
			checks[name] = &componentCheck{name: name}
		}
	}
	return checks
}

// readyzChecks lists the checks for the chain's /readyz.
func readyzChecks(checks map[string]*componentCheck) []healthz.HealthChecker {
	out := make([]healthz.HealthChecker, 0, len(checks))
	for _, name := range checkedComponents {
		if c, ok := checks[name]; ok {
			out = append(out, c)
		}
	}
	return out
}

// startupGate is the /readyz check that fails until start-up is complete:
// the chain is ready before the controllers, the node tokens, the node
// settings and --write-kubeconfig, and a client that sees /readyz 200 must
// find them. The chain's own readiness wait leaves it out
// (chain.Config.StartupChecks).
type startupGate struct {
	opened atomic.Bool
}

var _ healthz.HealthChecker = (*startupGate)(nil)

func newStartupGate() *startupGate { return &startupGate{} }

func (g *startupGate) Name() string { return "edgeplane-startup" }

func (g *startupGate) Check(*http.Request) error {
	if g.opened.Load() {
		return nil
	}
	return errStartupNotDone
}

// open makes the check pass from now on.
func (g *startupGate) open() { g.opened.Store(true) }

var errStartupNotDone = errors.New("start-up not finished")
