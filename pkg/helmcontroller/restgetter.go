package helmcontroller

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// restGetter gives Helm's kube client this controller's client config (user
// agent edgeplane/helm-controller), one discovery cache shared by every
// operation, and namespace as the default namespace of the chart's objects.
type restGetter struct {
	cfg        *rest.Config
	kubeconfig string
	namespace  string
	discovery  discovery.CachedDiscoveryInterface
	mapper     meta.RESTMapper
}

func newRESTGetter(cfg *rest.Config, kubeconfig string) (*restGetter, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(dc)
	return &restGetter{cfg: cfg, kubeconfig: kubeconfig, discovery: cached, mapper: restmapper.NewDeferredDiscoveryRESTMapper(cached)}, nil
}

// inNamespace is g for the objects of a release in namespace.
func (g *restGetter) inNamespace(namespace string) *restGetter {
	c := *g
	c.namespace = namespace
	return &c
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.discovery, nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }

// ToRawKubeConfigLoader is the kubeconfig with the namespace of the
// release; Helm reads only the namespace from it.
func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: g.kubeconfig},
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}})
}
