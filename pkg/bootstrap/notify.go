package bootstrap

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/sdnotify"
)

// notifyReady tells systemd (Type=notify) that start-up is done, once
// /readyz answers 200. Without a notify socket it does nothing.
func (s *server) notifyReady(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if ctx.Err() != nil {
		return // shutting down already
	}
	if s.chain != nil {
		// Start already waited for /readyz; ask again so READY=1 never
		// precedes a 200, whatever start-up does after the chain. Start
		// logged the slow readiness checks; this second look does not
		// repeat them (its own failure is logged below).
		readyCtx, cancel := context.WithTimeout(klog.NewContext(ctx, logr.Discard()), time.Minute)
		err := s.chain.Ready(readyCtx)
		cancel()
		if err != nil {
			logger.Error(err, "Not telling systemd READY=1: /readyz is not 200")
			return
		}
	}
	status := fmt.Sprintf("STATUS=ready in %.1f s", time.Since(s.started).Seconds())
	notify(ctx, sdnotify.Ready+"\n"+status)
}

// notifyStopping tells systemd that shutdown has begun.
func notifyStopping(ctx context.Context) {
	notify(ctx, sdnotify.Stopping+"\nSTATUS=shutting down")
}

// notify sends to the socket the command took from $NOTIFY_SOCKET
// (sdnotify.NewContext); without one it does nothing.
func notify(ctx context.Context, state string) {
	logger := klog.FromContext(ctx)
	sent, err := sdnotify.FromContext(ctx).Notify(state)
	if err != nil {
		logger.Error(err, "Telling systemd the state")
		return
	}
	if sent {
		logger.V(1).Info("Told systemd the state", "state", state)
	}
}
