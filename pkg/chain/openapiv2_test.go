package chain

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	restful "github.com/emicklei/go-restful/v3"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// widgetV2Config is a fresh OpenAPI v2 config for the test routes; built
// counts how often its definitions are asked for.
func widgetV2Config(built *atomic.Int32) *openapicommon.Config {
	return &openapicommon.Config{
		Info:           &spec.Info{InfoProps: spec.InfoProps{Title: "widgets", Version: "v0"}},
		GetDefinitions: countingDefinitions(widgetConfig().GetDefinitions, built),
	}
}

// countingDefinitions is get, counting its calls in n.
func countingDefinitions(get openapicommon.GetOpenAPIDefinitions, n *atomic.Int32) openapicommon.GetOpenAPIDefinitions {
	return func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		n.Add(1)
		return get(ref)
	}
}

// TestLazyOpenAPIV2 serves the same routes through upstream's InstallV2 and
// the lazy one: nothing is built before the first request, then JSON and
// protobuf are upstream's bytes with upstream's ETag, built once.
func TestLazyOpenAPIV2(t *testing.T) {
	container := restful.NewContainer()
	for _, root := range []string{"/api/v1", "/apis/widgets.example.com/v1"} {
		container.Add(widgetService(root))
	}
	var upstreamBuilds, lazyBuilds atomic.Int32
	upstream := mux.NewPathRecorderMux("upstream")
	routes.OpenAPI{Config: widgetV2Config(&upstreamBuilds)}.InstallV2(container, upstream)
	ours := mux.NewPathRecorderMux("lazy")
	installLazyOpenAPIV2(widgetV2Config(&lazyBuilds), container, ours)
	if n := lazyBuilds.Load(); n != 0 {
		t.Fatalf("definitions read %d times before any request, want none", n)
	}
	for _, accept := range []string{"", "application/json", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"} {
		want, got := call(t, upstream, "/openapi/v2", accept), call(t, ours, "/openapi/v2", accept)
		if got.code != http.StatusOK || got.body != want.body || got.etag != want.etag {
			t.Errorf("Accept %q: got %d etag %s, %d bytes; upstream %d etag %s, %d bytes", accept, got.code, got.etag, len(got.body), want.code, want.etag, len(want.body))
		}
		if accept == "" && !strings.Contains(got.body, `"/apis/widgets.example.com/v1/widgets"`) {
			t.Errorf("the document lacks the widgets path: %.300s", got.body)
		}
	}
	if n := lazyBuilds.Load(); n != 1 {
		t.Errorf("definitions read %d times over three requests, want once", n)
	}
}
