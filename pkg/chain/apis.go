package chain

import (
	"fmt"

	genericapiserver "k8s.io/apiserver/pkg/server"
	clientgoinformers "k8s.io/client-go/informers"
)

// APIInstaller installs an API group of edgeplane's own on the
// kube-apiserver while the chain is built, before it serves: the group is
// then served in this process behind the aggregator, with the chain's
// authentication, authorization and discovery, as a built-in group is.
//
// informers is the kube-apiserver's own shared informer factory (loopback,
// managedFields trimmed), started with the chain; listers taken from it
// share the caches the API server keeps anyway (the Node authorizer's
// Nodes and Pods) instead of adding their own.
type APIInstaller interface {
	InstallAPI(s *genericapiserver.GenericAPIServer, informers clientgoinformers.SharedInformerFactory) error
}

// installAPIs runs each installer on the kube-apiserver.
func installAPIs(s *genericapiserver.GenericAPIServer, informers clientgoinformers.SharedInformerFactory, apis []APIInstaller) error {
	for _, api := range apis {
		if err := api.InstallAPI(s, informers); err != nil {
			return fmt.Errorf("chain: install %T: %w", api, err)
		}
	}
	return nil
}
