package chain

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/controlplane/controller/legacytokentracking"
)

// The API server's post-start hooks run side by side. Upstream's
// start-legacy-token-tracking-controller (k8s.io/kubernetes v1.37.2,
// pkg/controlplane/apiserver/server.go) starts a controller that creates a
// ConfigMap in kube-system at once, while start-system-namespaces-controller
// creates kube-system only once its namespace informer has synced: on a
// fresh datastore the first create usually loses the race and the
// controller logs "Error while syncing ConfigMap ... namespaces
// "kube-system" not found" before it retries. edgeplane's hook ensures
// kube-system first, then starts the same controller.
const (
	upstreamLegacyTokenTrackingHook = "start-legacy-token-tracking-controller"
	legacyTokenTrackingHook         = "edgeplane/start-legacy-token-tracking-controller"
	systemNamespaceRetry            = 100 * time.Millisecond
)

// startLegacyTokenTracking is the hook that stands in for upstream's.
func startLegacyTokenTracking(hc genericapiserver.PostStartHookContext) error {
	client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
	if err != nil {
		return err
	}
	if err := ensureNamespace(hc.Context, client, metav1.NamespaceSystem); err != nil {
		return fmt.Errorf("%s: %w", legacyTokenTrackingHook, err)
	}
	go legacytokentracking.NewController(client).RunWithContext(hc.Context)
	return nil
}

// ensureNamespace creates namespace unless it exists, trying again for up
// to 30 s while the API server settles.
func ensureNamespace(ctx context.Context, client kubernetes.Interface, namespace string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, systemNamespaceRetry, bootstrapTimeout, true, func(ctx context.Context) (bool, error) {
		_, last = client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(last) {
			_, last = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(last) {
				last = nil
			}
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		err = last
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", namespace, err)
	}
	return nil
}
