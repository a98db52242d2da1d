package bootstrap

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
)

// defaultAuditPolicy records who did what (metadata: user, verb, resource,
// response code; never request or response bodies, so no Secret values) for
// every request except probes, events and the read-only and heartbeat
// traffic of the control plane's own components.
const defaultAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  # Probes and scrapes.
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version", "/metrics"]
  # Events are high-volume and describe themselves.
  - level: None
    resources:
      - group: ""
        resources: ["events"]
      - group: "events.k8s.io"
        resources: ["events"]
  # Read-only traffic of the control plane, nodes and kube-system service accounts.
  - level: None
    verbs: ["get", "list", "watch"]
    users: ["system:apiserver", "system:kube-controller-manager", "system:kube-scheduler", "system:kube-proxy"]
  - level: None
    verbs: ["get", "list", "watch"]
    userGroups: ["system:nodes", "system:serviceaccounts:kube-system"]
  # Lease heartbeats (leader election, node and API server identity).
  - level: None
    verbs: ["get", "update", "patch"]
    resources:
      - group: "coordination.k8s.io"
        resources: ["leases"]
  # Everything else: who, what, when, result.
  - level: Metadata
`

// writeAuditPolicy writes the default policy under dir (0600) and returns its path.
func writeAuditPolicy(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("audit policy: %w", err)
	}
	path := filepath.Join(dir, "audit-policy.yaml")
	// Durably: a torn policy would stop the API server at the next start.
	if _, err := atomicfile.Write(path, []byte(defaultAuditPolicy), 0o600); err != nil {
		return "", fmt.Errorf("audit policy: %w", err)
	}
	return path, nil
}
