package chain

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/pkg/controlplane/reconcilers"
)

// singleServerDisabledHooks are post-start hooks whose controllers rewrite a
// key in the datastore every 10 seconds for the sake of other API servers.
// With one server owning its datastore there are no other servers, and each
// rewrite costs tens of KB of flash (whole SQLite or bbolt pages):
//   - the identity lease (kube-system/apiserver-<id>) and its garbage collector
//     tell API servers apart for storage-version and mixed-version features;
//   - the peer-endpoint reconciler publishes this server's address to peers
//     for the mixed-version proxy.
//
// When servers share a datastore (Config.SharedDatastore) they stay on.
var singleServerDisabledHooks = []string{
	"start-kube-apiserver-identity-lease-controller",
	"start-kube-apiserver-identity-lease-garbage-collector",
	"peer-endpoint-reconciler-controller",
}

// endpointReconciler picks how the `kubernetes` Service endpoints are kept.
// The lease reconciler rewrites masterleases/<IP> every 10 s so that several
// servers can each keep their address listed; one server needs no lease: the
// master-count reconciler with a count of one writes only when the address
// changes. A server that publishes no endpoint runs none.
func endpointReconciler(shared, noEndpoint bool) (reconcilers.Type, int) {
	if noEndpoint {
		return reconcilers.NoneEndpointReconcilerType, 1
	}
	if shared {
		return reconcilers.LeaseEndpointReconcilerType, 1
	}
	return reconcilers.MasterCountReconcilerType, 1
}

// disabledHooks lists the hooks tune turns off for this configuration.
func disabledHooks(c *Config) []string {
	if c.SharedDatastore {
		return nil
	}
	return singleServerDisabledHooks
}

// tune applies edge-host settings to the built upstream configuration before
// it is completed. The three servers share one DisabledPostStartHooks set
// (the apiextensions and aggregator configs are shallow copies of the
// kube-apiserver's generic config), so inserting once covers the chain.
func tune(config *app.Config, c *Config) {
	generic := config.KubeAPIs.ControlPlane.Generic
	if generic.DisabledPostStartHooks == nil {
		generic.DisabledPostStartHooks = sets.NewString()
	}
	generic.DisabledPostStartHooks.Insert(disabledHooks(c)...)
	// edgeplane's own hooks do their work (bootstraphooks.go).
	generic.DisabledPostStartHooks.Insert(replacedHooks...)
	// build installs the kube-apiserver's OpenAPI itself, v3 lazily (openapiv3.go).
	generic.SkipOpenAPIInstallation = true
	applyTuningConfig(config, c.Tuning)
}
