package bootstrap

import (
	"fmt"
	"slices"
	"strings"

	"github.com/edgeplane/edgeplane/pkg/node"
)

// disableParts are the names --disable takes, in one table: which command
// takes each (a server, an agent). A server's node parts apply to its own
// node, and flannel and kube-proxy to every node (agents take the server's
// choice).
var disableParts = []struct {
	name          string
	server, agent bool
}{
	{componentControllerManager, true, false},
	{componentScheduler, true, false},
	{node.PartKubelet, true, false},
	{node.PartFlannel, true, false},
	{node.PartKubeProxy, true, false},
	{node.PartNetworkPolicy, true, true},
	{node.PartAPIEndpoint, false, true},
	{node.PartAPICache, false, true},
	{componentCoreDNS, true, false},
	{componentServiceLB, true, false},
	{componentHelmController, true, false},
	{node.PartLocalStorage, true, false},
	{componentIngress, true, false},
	{componentMetricsServer, true, false},
}

// disableable lists the --disable names of the server (agent false) or of
// the agent.
func disableable(agent bool) []string {
	var out []string
	for _, p := range disableParts {
		if (agent && p.agent) || (!agent && p.server) {
			out = append(out, p.name)
		}
	}
	return out
}

// parseDisable turns repeatable, comma-separated --disable values into a
// set of the names the command (agent or server) takes.
func parseDisable(agent bool, values []string) (map[string]bool, []error) {
	allowed := disableable(agent)
	set := map[string]bool{}
	var errs []error
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			switch {
			case name == "":
			case slices.Contains(allowed, name):
				set[name] = true
			default:
				errs = append(errs, fmt.Errorf("--disable %q is not one of: %s", name, strings.Join(allowed, ", ")))
			}
		}
	}
	return set, errs
}
