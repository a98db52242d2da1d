package component

import (
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Handlers are the event handlers a component registered on informers it
// may share with others (the API server's, chain.Server.Informers): the
// informers outlive the component, so it removes its handlers when it
// stops. The zero value is ready to use.
type Handlers struct {
	regs []registration
}

type registration struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// Add registers h on inf with no periodic resync, whatever the informer's
// factory resyncs at: the handler sees changes only, as on a factory of its
// own with a resync of 0.
func (hs *Handlers) Add(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
	reg, err := inf.AddEventHandlerWithResyncPeriod(h, 0)
	if err != nil {
		return err
	}
	hs.regs = append(hs.regs, registration{inf: inf, reg: reg})
	return nil
}

// Synced are the registrations' HasSynced: true once each handler has been
// given every object of its informer's first list (on a shared informer that
// synced long ago, the informer's own HasSynced is true before that).
func (hs *Handlers) Synced() []cache.InformerSynced {
	out := make([]cache.InformerSynced, 0, len(hs.regs))
	for _, r := range hs.regs {
		out = append(out, r.reg.HasSynced)
	}
	return out
}

// Remove unregisters every handler Add registered. Idempotent.
func (hs *Handlers) Remove(logger klog.Logger) {
	for _, r := range hs.regs {
		if err := r.inf.RemoveEventHandler(r.reg); err != nil {
			logger.Error(err, "Removing an informer's event handler")
		}
	}
	hs.regs = nil
}
