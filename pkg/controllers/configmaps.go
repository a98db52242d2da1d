package controllers

import (
	"context"
	"fmt"
	"os"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/bootstrap"
	"k8s.io/kubernetes/pkg/controller/certificates/rootcacertpublisher"
)

// The controller-manager's only two controllers that read ConfigMaps,
// root-ca-cert-publisher (kube-root-ca.crt in every namespace) and
// bootstrap-signer (kube-public/cluster-info), are built by upstream on its
// shared ConfigMap informer, so the controller-manager lists, watches and
// keeps a copy of every ConfigMap in the cluster, and the API server encodes
// each ConfigMap event once more for it. edgeplane turns both off in the
// controller-manager and runs them itself, as upstream builds them, on
// informers that list and watch only the objects they act on: ConfigMaps
// named kube-root-ca.crt, kube-public's cluster-info, and kube-system's
// bootstrap token Secrets (docs/PERFORMANCE.md).
var configMapControllers = []string{names.RootCACertificatePublisherController, names.BootstrapSignerController}

// rootCAConfigMap is the ConfigMap root-ca-cert-publisher keeps in every
// namespace (upstream's, unexported).
const rootCAConfigMap = "kube-root-ca.crt"

// configMapControllersInformerAgent ends the User-Agent of their informers'
// client.
const configMapControllersInformerAgent = "/configmap-controller-informers"

// runConfigMapControllers runs both controllers until ctx ends. Their
// informers use the controller-manager's own identity (kubeconfig), as
// upstream's shared informers do; each controller writes with its own
// service account's token and the RBAC role upstream bootstraps for it
// (core: the client that requests those tokens). rootCAFile is the cluster
// CA to publish. With shared (the API server's informers), the publisher
// reads Namespaces from them (termInformers) instead of watching them again.
func runConfigMapControllers(ctx context.Context, kubeconfig *rest.Config, core typedcorev1.CoreV1Interface, rootCAFile string, shared informers.SharedInformerFactory) error {
	rootCA, err := os.ReadFile(rootCAFile)
	if err != nil {
		return fmt.Errorf("controller-manager: root CA for %s: %w", rootCAConfigMap, err)
	}
	cfg := rest.CopyConfig(kubeconfig)
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + configMapControllersInformerAgent
	informerClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("controller-manager: informer client: %w", err)
	}
	builder := clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(kubeconfig), core, metav1.NamespaceSystem)
	publisherClient, err := builder.Client("root-ca-cert-publisher")
	if err != nil {
		return fmt.Errorf("controller-manager: root-ca-cert-publisher client: %w", err)
	}
	signerClient, err := builder.Client("bootstrap-signer")
	if err != nil {
		return fmt.Errorf("controller-manager: bootstrap-signer client: %w", err)
	}

	selecting := func(field, value string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(field, value).String()
		})
	}
	// One factory per filter: a factory's tweak applies to all its informers.
	rootCAs := informers.NewSharedInformerFactoryWithOptions(informerClient, 0, selecting("metadata.name", rootCAConfigMap))
	var namespaces informers.SharedInformerFactory = informers.NewSharedInformerFactory(informerClient, 0)
	if shared != nil {
		namespaces = newTermInformers("root-ca-cert-publisher", shared, namespaces, 0)
	}
	// Also on the error returns below: the publisher's handlers must not stay
	// on the API server's informers (Shutdown is idempotent).
	defer namespaces.Shutdown()
	signerOpts := bootstrap.DefaultSignerOptions()
	clusterInfo := informers.NewSharedInformerFactoryWithOptions(informerClient, 0,
		informers.WithNamespace(signerOpts.ConfigMapNamespace), selecting("metadata.name", signerOpts.ConfigMapName))
	tokens := informers.NewSharedInformerFactoryWithOptions(informerClient, 0,
		informers.WithNamespace(signerOpts.TokenSecretNamespace), selecting("type", string(bootstrapapi.SecretTypeBootstrapToken)))

	publisher, err := rootcacertpublisher.NewPublisher(rootCAs.Core().V1().ConfigMaps(), namespaces.Core().V1().Namespaces(), publisherClient, rootCA)
	if err != nil {
		return fmt.Errorf("controller-manager: root-ca-cert-publisher: %w", err)
	}
	signer, err := bootstrap.NewSigner(signerClient, tokens.Core().V1().Secrets(), clusterInfo.Core().V1().ConfigMaps(), signerOpts)
	if err != nil {
		return fmt.Errorf("controller-manager: bootstrap-signer: %w", err)
	}

	factories := []informers.SharedInformerFactory{rootCAs, namespaces, clusterInfo, tokens}
	for _, f := range factories {
		f.StartWithContext(ctx)
	}
	var wg sync.WaitGroup
	wg.Go(func() { publisher.Run(ctx, 1) })
	wg.Go(func() { signer.Run(ctx) })
	wg.Wait()
	for _, f := range factories {
		f.Shutdown()
	}
	return nil
}
