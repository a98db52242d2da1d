package node

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
)

// renewInterval is how often the server's own node's serving certificate
// is checked; it is renewed with a third of its life (a year) left.
const renewInterval = time.Hour

// servingRenewer renews the serving certificate a server minted for its
// own node. A failed renewal is logged and tried again at the next check:
// the certificate has months left when it is first due.
type servingRenewer struct {
	renew func(context.Context) error
	loop  background.Loop
}

func (r *servingRenewer) Name() string { return "serving-certificate" }

func (r *servingRenewer) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("serving-certificate")
	r.loop.Start(klog.NewContext(ctx, logger), func(ctx context.Context) {
		t := time.NewTicker(renewInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := r.renew(ctx); err != nil && ctx.Err() == nil {
					logger.Error(err, "Renewing the node's serving certificate; trying again in an hour")
				}
			}
		}
	})
	return nil
}

// Ready is immediate: the certificate was minted before the kubelet started.
func (r *servingRenewer) Ready(context.Context) error { return nil }

func (r *servingRenewer) Stop(ctx context.Context) error { return r.loop.Stop(ctx) }
