package chain

import (
	restful "github.com/emicklei/go-restful/v3"
	"github.com/google/uuid"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/cached"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// installLazyOpenAPIV2 serves the kube-apiserver's /openapi/v2 as upstream's
// routes.OpenAPI.InstallV2 does (k8s.io/apiserver v0.37.2: the same builder,
// pruning and handler, so the same bytes and ETag), but builds the document
// on its first request instead of at start. Upstream builds it in PrepareRun:
// 0.3 s of every start (docs/PERFORMANCE.md, "Start-up") and ~17 MB of live
// heap for a document that only clients older than kubectl 1.27 read. The
// aggregator in front merges it into its own /openapi/v2 lazily too, so
// nothing asks for it until a client does; once built it is kept, as
// upstream keeps it. The kube-apiserver's StaticOpenAPISpec, which InstallV2
// also sets, has no reader in the chain (only the apiextensions server reads
// its own).
func installLazyOpenAPIV2(config *openapicommon.Config, c *restful.Container, m *mux.PathRecorderMux) *handler.OpenAPIService {
	etag := uuid.New().String() // upstream's NewOpenAPIService tags its static spec so
	build := cached.Once(cached.Func(func() (*spec.Swagger, string, error) {
		sw, err := builder.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices(c.RegisteredWebServices()), config)
		if err != nil {
			return nil, "", err
		}
		sw.Definitions = handler.PruneDefaults(sw.Definitions)
		return sw, etag, nil
	}))
	service := handler.NewOpenAPIServiceLazy(build)
	service.RegisterOpenAPIVersionedService("/openapi/v2", m)
	return service
}
