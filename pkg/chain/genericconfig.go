package chain

import (
	"fmt"
	"time"

	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/filters"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/apiserver/pkg/util/webhook"
	clientgoinformers "k8s.io/client-go/informers"
	clientgoclientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/edgeplane/edgeplane/pkg/datastore"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/controlplane"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	cpoptions "k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	"k8s.io/kubernetes/pkg/kubeapiserver"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
)

// defaultInformerResync is the resync period of the API server's loopback
// informers. Upstream hard-codes 10 minutes; every resync replays each cached
// object to every handler (CPU wake-ups, and log lines such as the ClusterIP
// allocator's "updated ... allocator" on a quiet host). Watches deliver every
// change, so a resync only repairs handler bugs: twelve hours is plenty.
const defaultInformerResync = 12 * time.Hour

// newConfig builds the three servers' configuration as upstream's
// app.NewConfig does, except that the generic configuration comes from
// buildGenericConfig, whose informer resync we choose.
func newConfig(opts options.CompletedOptions, resync time.Duration, inProcess datastore.InProcessClient) (*app.Config, error) {
	generic, informers, storageFactory, err := buildGenericConfig(opts.CompletedOptions, opts.InformerName, resync, inProcess)
	if err != nil {
		return nil, err
	}
	kubeAPIs, serviceResolver, pluginInitializers, err := app.CreateKubeAPIServerConfig(opts, generic, informers, storageFactory)
	if err != nil {
		return nil, err
	}
	cp := kubeAPIs.ControlPlane
	authInfoResolver := webhook.NewDefaultAuthenticationInfoResolverWrapper(cp.ProxyTransport, cp.Generic.EgressSelector, cp.Generic.LoopbackClientConfig, cp.Generic.TracerProvider)
	apiExtensions, err := controlplaneapiserver.CreateAPIExtensionsConfig(*cp.Generic, cp.VersionedInformers, pluginInitializers, opts.CompletedOptions, opts.MasterCount, serviceResolver, authInfoResolver)
	if err != nil {
		return nil, err
	}
	aggregator, err := controlplaneapiserver.CreateAggregatorConfig(*cp.Generic, opts.CompletedOptions, cp.VersionedInformers, serviceResolver, cp.ProxyTransport, cp.Extra.PeerProxy, pluginInitializers)
	if err != nil {
		return nil, err
	}
	return &app.Config{Options: opts, KubeAPIs: kubeAPIs, ApiExtensions: apiExtensions, Aggregator: aggregator}, nil
}

// buildGenericConfig is our counterpart of upstream's
// controlplaneapiserver.BuildGenericConfig: the same option application
// order, with the loopback informer resync as a parameter.
func buildGenericConfig(s cpoptions.CompletedOptions, informerName *cache.InformerName, resync time.Duration, inProcess datastore.InProcessClient) (*genericapiserver.Config, clientgoinformers.SharedInformerFactory, *serverstorage.DefaultStorageFactory, error) {
	schemes := []*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme}
	resources := controlplane.DefaultAPIResourceConfigSource()

	codecs := legacyscheme.Codecs
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.CBORServingAndStorage) {
		codecs = serializer.NewCodecFactory(legacyscheme.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo))
	}
	c := genericapiserver.NewConfig(codecs)
	c.Flagz = s.Flagz
	c.MergedResourceConfig = resources
	if err := s.GenericServerRunOptions.ApplyTo(c); err != nil {
		return nil, nil, nil, err
	}
	if err := s.SecureServing.ApplyToConfig(c); err != nil {
		return nil, nil, nil, err
	}
	// In-process clients speak protobuf, uncompressed.
	c.LoopbackClientConfig.ContentConfig.ContentType = "application/vnd.kubernetes.protobuf"
	c.LoopbackClientConfig.DisableCompression = true

	client, err := clientgoclientset.NewForConfig(c.LoopbackClientConfig)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loopback client: %w", err)
	}
	informers := clientgoinformers.NewSharedInformerFactoryWithOptions(client, resync,
		clientgoinformers.WithTransform(dropManagedFields),
		clientgoinformers.WithInformerName(informerName),
	)
	if err := s.Features.ApplyTo(c, client, informers); err != nil {
		return nil, nil, nil, err
	}
	if err := s.APIEnablement.ApplyTo(c, resources, legacyscheme.Scheme); err != nil {
		return nil, nil, nil, err
	}
	if err := s.EgressSelector.ApplyTo(c); err != nil {
		return nil, nil, nil, err
	}
	if err := s.Traces.ApplyTo(c.EgressSelector, c); err != nil {
		return nil, nil, nil, err
	}

	definitions := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	namer := openapinamer.NewDefinitionNamer(schemes...)
	c.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, namer)
	c.OpenAPIConfig.Info.Title = "Kubernetes"
	c.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(definitions, namer)
	c.OpenAPIV3Config.Info.Title = "Kubernetes"

	c.LongRunningFunc = filters.BasicLongRunningRequestCheck(
		sets.NewString("watch", "proxy"),
		sets.NewString("attach", "exec", "proxy", "log", "portforward"),
	)

	if c.EgressSelector != nil {
		s.Etcd.StorageConfig.Transport.EgressLookup = c.EgressSelector.Lookup
	}
	s.Etcd.StorageConfig.Transport.TracerProvider = c.TracerProvider
	factoryConfig := kubeapiserver.NewStorageFactoryConfigEffectiveVersion(c.EffectiveVersion)
	factoryConfig.APIResourceConfig = c.MergedResourceConfig
	factoryConfig.DefaultResourceEncoding.SetEffectiveVersion(c.EffectiveVersion)
	storageFactory, err := factoryConfig.Complete(s.Etcd).New()
	if err != nil {
		return nil, nil, nil, err
	}
	storageFactory.StorageConfig.StorageObjectCountTracker = c.StorageObjectCountTracker
	if err := s.Etcd.ApplyWithStorageFactoryTo(storageFactory, c); err != nil {
		return nil, nil, nil, err
	}
	c.RESTOptionsGetter = shareStorageClients(c.RESTOptionsGetter, inProcess)

	// Authentication and authorization run until the server has drained.
	ctx := wait.ContextForChannel(c.DrainedNotify())
	// The client CA provider is made here, as ApplyTo would make it, so that
	// the client certificate cache (clientcertcache.go) sees its reloads.
	clientCA, err := s.Authentication.ClientCert.GetClientCAContentProvider()
	if err != nil {
		return nil, nil, nil, err
	}
	s.Authentication.ClientCert.CAContentProvider = clientCA
	if err := s.Authentication.ApplyTo(ctx, &c.Authentication, c.SecureServing, c.EgressSelector, c.OpenAPIConfig, c.OpenAPIV3Config, client, informers, c.APIServerID); err != nil {
		return nil, nil, nil, err
	}
	if clientCA != nil && c.Authentication.Authenticator != nil {
		c.Authentication.Authenticator = newClientCertCache(c.Authentication.Authenticator, clientCA.VerifyOptions,
			s.Authentication.RequestHeader.UsernameHeaders)
	}
	var enablesRBAC bool
	c.Authorization.Authorizer, c.RuleResolver, enablesRBAC, err = controlplaneapiserver.BuildAuthorizer(ctx, s, c.EgressSelector, c.APIServerID, informers)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("invalid authorization config: %w", err)
	}
	if s.Authorization != nil && !enablesRBAC {
		c.DisabledPostStartHooks.Insert(rbacrest.PostStartHookName)
	}
	if err := s.Audit.ApplyTo(c); err != nil {
		return nil, nil, nil, err
	}
	c.AggregatedDiscoveryGroupManager = aggregated.NewResourceManager("apis")
	return c, informers, storageFactory, nil
}

// dropManagedFields trims what the loopback informers cache: the API server's
// own controllers never read managed fields.
func dropManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetManagedFields() != nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
