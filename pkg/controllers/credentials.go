package controllers

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// credentialsBurst is the client-side burst of the controller-manager's
// credentials client (upstream's Config.Client). With
// UseServiceAccountCredentials that client provisions every controller's
// kube-system service account while the controllers are built, one at a
// time (GET the account, GET the namespace, POST the account: three requests
// each on a first start), and then fetches each controller's token on its
// first request (GET the account, POST a TokenRequest). For the ~40
// controllers that is ~210 requests within the first second; with the shared
// burst of 100 the rest waited 20 ms each at 50 QPS, ~0.5 s of a cold start
// spent on client-side throttling of requests to an API server in this
// process. The sustained rate stays clientQPS; the bucket refills in 6 s.
// Upstream also sends events through this client (the event broadcaster has
// its own per-object spam filter).
const credentialsBurst = 300

// credentialsConfig is kubeconfig (the controller-manager's client config,
// user agent included) with the credentials client's rate limit. kubeconfig
// is not modified: the shared informers and the controllers' own clients keep
// clientQPS and clientBurst.
func credentialsConfig(kubeconfig *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(kubeconfig)
	cfg.QPS = clientQPS
	cfg.Burst = credentialsBurst
	cfg.RateLimiter = nil
	return cfg
}

// credentialsClient builds the credentials client from kubeconfig.
func credentialsClient(kubeconfig *rest.Config) (*kubernetes.Clientset, error) {
	client, err := kubernetes.NewForConfig(credentialsConfig(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("controller-manager: credentials client: %w", err)
	}
	return client, nil
}
