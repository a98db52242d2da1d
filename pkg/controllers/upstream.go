package controllers

import (
	"fmt"

	"github.com/spf13/pflag"

	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	signerconfig "k8s.io/kubernetes/pkg/controller/certificates/signer/config"
	"k8s.io/kubernetes/pkg/controller/nodeipam/ipam"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// Lease names in kube-system: the upstream ones, which the bootstrap RBAC
// roles system:kube-controller-manager and system:kube-scheduler may update.
const (
	controllerManagerLease = "kube-controller-manager"
	schedulerLease         = "kube-scheduler"
)

// Client rate limits of the controller-manager.
const (
	clientQPS   = 50
	clientBurst = 100
)

// extraControllers are enabled on top of the default set ("*"): it deletes
// expired bootstrap tokens. bootstrap-signer, which signs the cluster-info
// ConfigMap for them, runs outside the controller-manager with
// root-ca-cert-publisher (configmaps.go).
var extraControllers = []string{names.TokenCleanerController}

// controllerManagerOptions fills upstream kube-controller-manager options as Go
// structs, the same fields its flags would set.
func controllerManagerOptions(o *Options) (*cmoptions.KubeControllerManagerOptions, error) {
	s, err := cmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("controller-manager: default options: %w", err)
	}
	pki := o.PKI

	// Our client certificate (CN system:kube-controller-manager) for the shared
	// informers and the token controller; every other controller gets a token
	// for its own kube-system service account and the least-privilege RBAC role
	// upstream bootstraps for it (system:controller:<name>).
	s.Generic.ClientConnection.Kubeconfig = pki.ControllerManagerKubeconfig
	s.KubeCloudShared.UseServiceAccountCredentials = true
	// The scheduler's client defaults. Upstream's 20/30 makes the first start
	// wait ~4 s on client-side throttling alone while ~45 controller service
	// accounts are created; the API server is in this process.
	s.Generic.ClientConnection.QPS = clientQPS
	s.Generic.ClientConnection.Burst = clientBurst

	s.Generic.Controllers = append([]string{"*"}, extraControllers...)
	for _, name := range configMapControllers {
		s.Generic.Controllers = append(s.Generic.Controllers, "-"+name)
	}
	// Run by runTaintEviction instead, on a Node informer that spares
	// autonomous nodes (autonomy.go).
	for _, name := range evictionControllers {
		s.Generic.Controllers = append(s.Generic.Controllers, "-"+name)
	}
	capWorkers(s, o.MaxWorkers)
	if o.Lean {
		for _, name := range leanDisabledControllers {
			s.Generic.Controllers = append(s.Generic.Controllers, "-"+name)
		}
	}

	// Upstream leader election exits the process when it ends; see runner.go.
	s.Generic.LeaderElection.LeaderElect = false

	// No serving: port 0 disables the listener and with it the delegated
	// authentication and authorization clients.
	s.SecureServing.BindPort = 0

	// Metrics settings (hidden metrics, disabled metrics, label allow-lists)
	// are process-wide and belong to the API server's options; nil keeps
	// Config from applying the defaults over them again.
	s.Metrics = nil

	// Node lifecycle: see nodeLifecycleFlagDefaults.
	nodeLifecycleFlagDefaults(s)
	if o.NodeMonitorGracePeriod > 0 {
		s.NodeLifecycleController.NodeMonitorGracePeriod.Duration = o.NodeMonitorGracePeriod
	}

	// Node IPAM.
	s.KubeCloudShared.ClusterCIDR = o.clusterCIDR()
	s.KubeCloudShared.AllocateNodeCIDRs = o.AllocateNodeCIDRs
	// The kube-controller-manager command's flag defaults to RangeAllocator;
	// its options struct leaves it empty, which node IPAM refuses.
	s.KubeCloudShared.CIDRAllocatorType = string(ipam.RangeAllocatorType)
	s.KubeCloudShared.ConfigureCloudRoutes = false
	if o.ServiceCIDR != nil {
		s.NodeIPAMController.ServiceCIDR = o.ServiceCIDR.String()
	}

	// CSR signing, one CA per signer. Client certificates must chain to the CA
	// the API server trusts for client auth; kubelet serving certificates to
	// the kubelet-serving CA, which only the API server trusts (never the
	// cluster CA that clients trust for the API server: a node could then
	// pose as it). Upstream silently skips csrsigning when no signer files
	// are set. legacy-unknown stays unsigned. The signing duration is the one
	// pkg/certs bases the kubelet-serving transition on.
	client := signerconfig.CSRSigningConfiguration{CertFile: pki.ClientCA.Cert, KeyFile: pki.ClientCA.Key}
	s.CSRSigningController.KubeletClientSignerConfiguration = client
	s.CSRSigningController.KubeAPIServerClientSignerConfiguration = client
	s.CSRSigningController.KubeletServingSignerConfiguration = signerconfig.CSRSigningConfiguration{
		CertFile: pki.KubeletServingCA.Cert, KeyFile: pki.KubeletServingCA.Key,
	}
	s.CSRSigningController.ClusterSigningDuration.Duration = certs.SigningDuration(o.LeafValidity)

	// Service accounts: legacy token secrets are signed with our key, and the
	// cluster CA is published as kube-root-ca.crt in every namespace.
	s.SAController.ServiceAccountKeyFile = pki.ServiceAccountKey
	s.SAController.RootCAFile = pki.ServerCA.Cert
	return s, nil
}

// schedulerOptions fills upstream kube-scheduler options.
//
// Setup replaces Options.ComponentConfig with the defaults, then applies only
// those deprecated and leader-election flags marked as changed; without a
// --config file that is the one way in. So the two settings are applied
// through the options' own flag sets (which write the bound struct fields and
// mark them changed), never through the process's command line.
func schedulerOptions(o *Options) (*schedoptions.Options, error) {
	opts := schedoptions.NewOptions()
	opts.SecureServing.BindPort = 0
	opts.Metrics = nil // process-wide, see controllerManagerOptions
	for _, f := range []struct{ set, name, value string }{
		{"deprecated", "kubeconfig", o.PKI.SchedulerKubeconfig},
		{"leader election", "leader-elect", "false"},
	} {
		fs := opts.Flags.FlagSet(f.set)
		if fs.Lookup(f.name) == nil {
			return nil, fmt.Errorf("scheduler: upstream options have no %q setting in %q", f.name, f.set)
		}
		if err := fs.Set(f.name, f.value); err != nil {
			return nil, fmt.Errorf("scheduler: set %s: %w", f.name, err)
		}
	}
	return opts, nil
}

// nodeLifecycleFlagDefaults gives the node lifecycle controller the defaults
// of the kube-controller-manager command's flags. Upstream debt,
// k8s.io/kubernetes v1.37.2: NodeEvictionRate (0.1), SecondaryNodeEvictionRate
// (0.01), LargeClusterSizeThreshold (50) and UnhealthyZoneThreshold (0.55)
// have their defaults only in NodeLifecycleControllerOptions.AddFlags, so
// options built in Go leave them 0. With an eviction rate of 0 the controller
// never adds the NoExecute taint to a node that stopped reporting (only the
// NoSchedule one), so the pods of a dead node are never evicted (bench/cmd/nodes
// -kill shows it). Registering those flags on a throwaway flag set
// writes the defaults into the struct, whatever upstream makes them.
// TestNodeLifecycleFlagDefaultsDebt fails once upstream defaults the struct.
func nodeLifecycleFlagDefaults(s *cmoptions.KubeControllerManagerOptions) {
	s.NodeLifecycleController.AddFlags(pflag.NewFlagSet("node-lifecycle-defaults", pflag.ContinueOnError))
}
