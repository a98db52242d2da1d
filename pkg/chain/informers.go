package chain

import (
	"context"

	clientgoinformers "k8s.io/client-go/informers"
)

// Informers is the kube-apiserver's own shared informer factory, for the
// controllers edgeplane runs in the server process (servicelb, the node
// tunnel, the local storage provisioner): they read the Nodes, Services,
// claims and classes the API server lists and watches for itself (its Node
// authorizer, its admission plugins) from the same caches, instead of each
// opening its own watch and keeping its own copy. Nil before Start.
//
// Its informers list and watch over the loopback connection as the API
// server (system:apiserver, in system:masters), which may read everything
// the admin kubeconfig may; the controllers still write with their own
// clients. Objects come without managedFields, and the factory's resync is
// InformerResync (12 h): a controller that wants none registers its handlers
// with a resync period of 0 (AddEventHandlerWithResyncPeriod). Its caches are
// shared: never modify an object read from them.
//
// Start starts every informer asked for since the last Start, for as long as
// the chain runs, whatever channel it is given (a controller that stops
// must not stop the informers others read); Shutdown does nothing (the chain
// owns them). A controller removes its event handlers when it stops.
func (s *Server) Informers() clientgoinformers.SharedInformerFactory {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.informers == nil {
		return nil
	}
	return s.informers
}

// sharedInformers is the factory Informers hands out: the chain's run
// context bounds every informer it starts.
type sharedInformers struct {
	clientgoinformers.SharedInformerFactory
	ctx context.Context // the chain's run context
}

// Start starts the informers asked for since the last Start until the chain
// stops; the caller's channel is not used.
func (f *sharedInformers) Start(<-chan struct{}) { f.SharedInformerFactory.StartWithContext(f.ctx) }

// StartWithContext is Start: the caller's context is not used either.
func (f *sharedInformers) StartWithContext(context.Context) {
	f.SharedInformerFactory.StartWithContext(f.ctx)
}

// Shutdown does nothing: the informers run until the chain stops.
func (f *sharedInformers) Shutdown() {}
