package chain

import (
	"fmt"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"

	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// defaultInformerResync is the resync period of the API server's loopback
// informers. Upstream hard-codes 10 minutes; every resync replays each cached
// object to every handler (CPU wake-ups, and log lines such as the ClusterIP
// allocator's "updated ... allocator" on a quiet host). Watches deliver every
// change, so a resync only repairs handler bugs: twelve hours is plenty.
const defaultInformerResync = 12 * time.Hour

// newConfig builds the three servers' configuration as upstream's
// app.NewConfig does (upstreamcopy.go), with what edgeplane changes applied
// around upstream's code rather than inside it:
//   - before: the client CA provider is made and set on the options, where
//     upstream's Authentication.ApplyTo takes it instead of making its own,
//     so that the client certificate cache (clientcertcache.go) sees its
//     reloads;
//   - in upstream's builder: the loopback informers' resync period (the
//     one reason for the copy);
//   - after the generic config is built, before the three servers' configs
//     copy it: storage on shared datastore clients (storageclient.go) and the
//     client certificate cache around the authenticator, and the cluster
//     network's dialer and handler (clusternet.go).
func newConfig(opts options.CompletedOptions, resync, compaction time.Duration, inProcess datastore.InProcessClient, cluster ClusterNetwork) (*app.Config, error) {
	clientCert := opts.Authentication.ClientCert
	clientCA, err := clientCert.GetClientCAContentProvider()
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	clientCert.CAContentProvider = clientCA
	usernameHeaders := opts.Authentication.RequestHeader.UsernameHeaders
	clients := newStorageClients(inProcess, compaction)
	c, err := upstreamNewConfig(opts, resync, func(c *genericapiserver.Config) {
		c.RESTOptionsGetter = clients.share(c.RESTOptionsGetter)
		if clientCA != nil && c.Authentication.Authenticator != nil {
			c.Authentication.Authenticator = newClientCertCache(c.Authentication.Authenticator, clientCA.VerifyOptions, usernameHeaders)
		}
		cluster.apply(c)
	})
	if err != nil {
		return nil, err
	}
	// Custom resources' storage on the same clients: on upstream's getter
	// each served CRD dialled the datastore's socket for a client of its
	// own, and a request for a new CRD waited on that dial (holding the
	// handler's lock for every CRD) when the socket was gone.
	extra := &c.ApiExtensions.ExtraConfig
	extra.CRDRESTOptionsGetter = clients.share(extra.CRDRESTOptionsGetter)
	return c, nil
}
