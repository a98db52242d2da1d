package chain

import (
	"context"
	"sync"

	clientgoinformers "k8s.io/client-go/informers"
)

// contextInformers is the API server's shared informer factory with Start
// made StartWithContext. client-go's Start(stopCh) runs every informer under
// wait.ContextForChannel(stopCh), a context type of apimachinery's own, and
// every reflector derives a cancelable context from its informer's: the Go
// runtime propagates cancellation from a context type it does not know with
// a goroutine of its own (context.propagateCancel), so each informer kept one
// more goroutine for the life of the process. From a context.WithCancel
// context it propagates without one. Start makes one such context per stop
// channel, with one goroutine to cancel it when the channel closes. The
// informers run exactly as long as before.
type contextInformers struct {
	clientgoinformers.SharedInformerFactory

	mu       sync.Mutex
	contexts map[<-chan struct{}]context.Context
}

func newContextInformers(f clientgoinformers.SharedInformerFactory) *contextInformers {
	return &contextInformers{SharedInformerFactory: f, contexts: map[<-chan struct{}]context.Context{}}
}

// Start starts the informers asked for since the last start until stopCh
// closes.
func (f *contextInformers) Start(stopCh <-chan struct{}) {
	f.SharedInformerFactory.StartWithContext(f.context(stopCh))
}

// context is the context that ends when stopCh closes.
func (f *contextInformers) context(stopCh <-chan struct{}) context.Context {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx, ok := f.contexts[stopCh]; ok {
		return ctx
	}
	if stopCh == nil { // never closes
		return context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-stopCh
		cancel()
	}()
	f.contexts[stopCh] = ctx
	return ctx
}
