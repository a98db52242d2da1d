package chain

import (
	"net/http"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/egressselector"
)

// ClusterNetwork is how the API server reaches the cluster network, and
// what else its port serves. Both fields are optional.
type ClusterNetwork struct {
	// Dial is the API server's dialer of the network context "cluster" of
	// upstream's egress selector: kubelets (logs, exec, attach,
	// port-forward), the node proxy, and the Services of APIServices and
	// webhooks. Upstream's kube-apiserver takes it when the generic
	// config has an egress selector (CreateKubeAPIServerConfig sets the
	// kubelet client's Lookup and the proxy transport's DialContext from
	// it); the other network contexts stay direct.
	Dial utilnet.DialFunc
	// Wrap wraps the handler the API port serves: it sees every request
	// before the API server's filters, with the API server's own
	// authenticator to authenticate the ones it serves itself.
	Wrap func(next http.Handler, authn authenticator.Request) http.Handler
}

// apply sets them on the generic config, before the three servers' configs
// copy it.
func (n ClusterNetwork) apply(c *genericapiserver.Config) {
	if n.Dial != nil {
		c.EgressSelector = egressselector.NewEgressSelectorWithMap(map[egressselector.EgressType]utilnet.DialFunc{
			egressselector.Cluster: n.Dial,
		})
	}
	if n.Wrap != nil {
		build := c.BuildHandlerChainFunc
		c.BuildHandlerChainFunc = func(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
			return n.Wrap(build(apiHandler, gc), gc.Authentication.Authenticator)
		}
	}
}
