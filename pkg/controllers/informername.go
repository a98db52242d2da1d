package controllers

import (
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// controllerManagerInformerName is the informer name upstream's
// controller-manager registers for its shared informers.
const controllerManagerInformerName = "kube-controller-manager"

// releaseLeakedInformerName works around kube-controller-manager v1.37.2
// (cmd/kube-controller-manager/app/controllermanager.go): CreateControllerContext
// reserves the process-wide informer name "kube-controller-manager" and only
// the shared informer factory's Shutdown releases it, which Run defers only
// once the context is built and the controllers are built. When either fails
// (WaitForAPIServer's 10 s while the datastore is down, a controller that
// cannot be built), the name stays reserved, and every later term in this
// process fails at once with `informer name "kube-controller-manager" is
// already registered`: the controller-manager never comes back after a
// datastore outage. A process that exits on that error (upstream's) does not
// see it. client-go keeps the reservation private; its one way to release a
// name it does not hand out is ResetInformerNamesForTesting, which releases
// every name in the process (the scheduler's and the API server's too; that
// only stops their informers' metrics under those names until they restart).
// So it runs only after a failed term, and only when the name is still held.
// TestUpstreamInformerNameLeak fails once upstream releases the name on those
// paths; then delete this.
func releaseLeakedInformerName(logger klog.Logger) {
	n, err := cache.NewInformerName(controllerManagerInformerName)
	if err == nil {
		n.Release() // not leaked
		return
	}
	logger.Info("Releasing the controller-manager's informer name, left reserved by a failed start (upstream v1.37.2)", "err", err.Error())
	cache.ResetInformerNamesForTesting()
}
