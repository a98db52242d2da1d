package bootstrap

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/background"
	"github.com/edgeplane/edgeplane/pkg/datastore"
)

// DatastoreFaultEnv, set to 1 in a test's environment, makes SIGUSR2 break
// the running server's datastore from inside (datastore.InjectFault: kine's
// socket closed, embedded etcd's member stopped), so that the test sees what
// a datastore dying under the server does. It is for tests only: no flag
// or config sets it, and without it SIGUSR2 keeps its default action.
const DatastoreFaultEnv = "EDGEPLANE_TEST_DATASTORE_FAULT"

// datastoreFaultTask is the task that waits for SIGUSR2, or nil unless
// DatastoreFaultEnv is 1.
func datastoreFaultTask(ctx context.Context, store datastore.Datastore) *background.Task {
	if os.Getenv(DatastoreFaultEnv) != "1" || store == nil {
		return nil
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	klog.FromContext(ctx).Info("Test hook: SIGUSR2 breaks the datastore", "env", DatastoreFaultEnv)
	return background.NewTask("datastore-fault-hook", func(ctx context.Context) {
		defer signal.Stop(sig)
		logger := klog.FromContext(ctx)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				err := datastore.InjectFault(store)
				logger.Info("Test hook: broke the datastore", "datastore", store.Name(), "err", err)
			}
		}
	})
}
