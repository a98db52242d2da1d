// Package chain builds and runs the upstream three-server delegation chain
// (apiextensions -> kube-apiserver -> aggregator) behind one HTTPS listener,
// from upstream option structs rather than flag strings.
package chain

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/server/healthz"
	"sigs.k8s.io/yaml"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// Files are the PKI files the chain serves and authenticates with.
type Files struct {
	ServingCert, ServingKey string // the apiserver's serving pair, signed by the cluster CA
	KubeletCA               string // verifies kubelet serving certs: the kubelet-serving CA bundle
	ClientCA                string // verifies client certificates (admin, controllers, kubelets)
	FrontProxyCA            string // verifies the request-header (aggregation) proxy client
	FrontProxyClientCert    string
	FrontProxyClientKey     string
	KubeletClientCert       string // the apiserver's identity towards kubelets
	KubeletClientKey        string
	ServiceAccountKey       string // private key that signs service-account tokens
	ServiceAccountPub       string // public key that verifies them
}

// Storage is how the chain reaches the etcd3 endpoint of the datastore:
// the datastore's own client configuration. Its InProcess (optional), for a
// datastore in this process, gives the storage behind the watch cache a
// client that calls it without gRPC.
type Storage = datastore.ClientConfig

// Config is what the chain needs from the rest of edgeplane. Every field is
// required unless its comment says otherwise.
type Config struct {
	// Listener is the already-bound HTTPS listener; the chain takes ownership and closes it on Stop.
	Listener         net.Listener
	AdvertiseAddress net.IP
	ServiceCIDR      *net.IPNet
	ClusterDomain    string
	// StateDir holds generated configuration files (authentication config), created 0700.
	StateDir string
	Files    Files
	Storage  Storage
	// SharedDatastore is true when other API servers use the same datastore:
	// it keeps the identity lease, peer-endpoint and lease-based endpoint
	// reconcilers that a single server does without (see tune.go).
	SharedDatastore bool
	// NoServiceEndpoint publishes no endpoint for the `kubernetes` Service
	// (upstream's none endpoint reconciler): the server is reachable from
	// its own host only, so AdvertiseAddress is served to nobody.
	NoServiceEndpoint bool
	// Day2 holds secrets encryption and audit logging (optional).
	Day2 Day2
	// AllowPrivileged admits pods with privileged containers (upstream's
	// --allow-privileged; false refuses them, upstream's default). It is
	// process-wide (k8s.io/kubernetes/pkg/capabilities): a kubelet in the
	// same process has the same setting.
	AllowPrivileged bool
	// CompactionInterval is how often the API server compacts the datastore
	// (0 turns compaction off).
	CompactionInterval time.Duration
	// ReadyzChecks are extra /readyz checks, such as the in-process controllers'.
	ReadyzChecks []healthz.HealthChecker
	// StartupChecks name ReadyzChecks that pass only once the caller's own
	// start-up, after the chain's, is complete. Ready leaves them out (with
	// /readyz?exclude=), so that it can report the chain ready before they pass.
	StartupChecks []string
	// InformerResync is the loopback informers' resync period (default 12h).
	InformerResync time.Duration
	// Tuning holds the resource profile's API server settings (optional).
	Tuning Tuning
	// ShutdownWatchGrace bounds how long watches may take to drain on Stop (default 2s).
	ShutdownWatchGrace time.Duration
	// APIs are API groups of edgeplane's own that the kube-apiserver serves
	// beside its built-in ones (optional), such as metrics.k8s.io.
	APIs []APIInstaller
	// Cluster, when set, is how the API server reaches the cluster network
	// and takes connections of its own on the API port (optional): node
	// tunnels (clusternet.go).
	Cluster ClusterNetwork
}

// validate reports every missing input at once.
func (c *Config) validate() error {
	var errs []error
	if c.Listener == nil {
		errs = append(errs, errors.New("chain: no listener"))
	}
	if c.AdvertiseAddress == nil {
		errs = append(errs, errors.New("chain: no advertise address"))
	}
	if c.ServiceCIDR == nil {
		errs = append(errs, errors.New("chain: no service CIDR"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("chain: no state dir"))
	}
	if len(c.Storage.Endpoints) == 0 {
		errs = append(errs, errors.New("chain: no datastore endpoints"))
	}
	for name, path := range map[string]string{
		"serving cert": c.Files.ServingCert, "serving key": c.Files.ServingKey,
		"client CA": c.Files.ClientCA, "front-proxy CA": c.Files.FrontProxyCA,
		// Without it the API server would not verify kubelets at all.
		"kubelet CA":          c.Files.KubeletCA,
		"service-account key": c.Files.ServiceAccountKey, "service-account public key": c.Files.ServiceAccountPub,
	} {
		if path == "" {
			errs = append(errs, fmt.Errorf("chain: no %s file", name))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// anonymousPaths are the only paths anonymous requests may reach (exact
// paths, no prefixes): the health endpoints, which load balancers and probes
// need, and kube-public/cluster-info, which a joining node reads before it
// trusts the server (RBAC lets anonymous GET that one object and nothing
// else). Nothing else answers an unauthenticated caller.
var anonymousPaths = []string{"/healthz", "/livez", "/readyz", "/api/v1/namespaces/kube-public/configmaps/cluster-info"}

// writeAuthenticationConfig writes the structured authentication configuration
// that limits anonymous authentication to anonymousPaths.
func writeAuthenticationConfig(dir string) (string, error) {
	type condition struct {
		Path string `json:"path"`
	}
	conds := make([]condition, 0, len(anonymousPaths))
	for _, p := range anonymousPaths {
		conds = append(conds, condition{Path: p})
	}
	doc := map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AuthenticationConfiguration",
		"anonymous":  map[string]any{"enabled": true, "conditions": conds},
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("chain: create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "authentication-config.yaml")
	// Durably (temp, fsync, rename, directory fsync): a power cut must not
	// leave a torn file the API server refuses at the next start.
	if _, err := atomicfile.Write(path, data, 0o600); err != nil {
		return "", fmt.Errorf("chain: %w", err)
	}
	return path, nil
}
