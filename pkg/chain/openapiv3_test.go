package chain

import (
	"context"
	"encoding/json"
	"io"
	"k8s.io/apimachinery/pkg/util/wait"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	restful "github.com/emicklei/go-restful/v3"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Widget is the type the test group-versions serve.
type Widget struct {
	Name string `json:"name"`
}

const widgetName = "github.com/edgeplane/edgeplane/pkg/chain.Widget"

// widgetConfig is a fresh OpenAPI v3 config for the test routes: builder3
// fills in a config on first use, so the two servers compared get one each.
func widgetConfig() *openapicommon.OpenAPIV3Config {
	return &openapicommon.OpenAPIV3Config{
		Info: &spec.Info{InfoProps: spec.InfoProps{Title: "widgets", Version: "v0"}},
		GetDefinitions: func(openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
			return map[string]openapicommon.OpenAPIDefinition{widgetName: {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type:       []string{"object"},
				Properties: map[string]spec.Schema{"name": {SchemaProps: spec.SchemaProps{Type: []string{"string"}}}},
			}}}}
		},
	}
}

func widgetService(root string) *restful.WebService {
	ws := new(restful.WebService).Path(root).Produces(restful.MIME_JSON)
	noop := func(*restful.Request, *restful.Response) {}
	ws.Route(ws.GET("/widgets").To(noop).Operation("list"+root).Writes(Widget{}).Returns(http.StatusOK, "OK", Widget{}))
	ws.Route(ws.POST("/widgets").To(noop).Operation("create"+root).Reads(Widget{}).Returns(http.StatusCreated, "Created", Widget{}))
	return ws
}

type answer struct {
	code     int
	etag     string
	location string
	body     string
}

func call(t *testing.T, h http.Handler, path, accept string) answer {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	body, _ := io.ReadAll(w.Result().Body)
	return answer{code: w.Code, etag: w.Header().Get("Etag"), location: w.Header().Get("Location"), body: string(body)}
}

// TestLazyOpenAPIV3 serves the same routes through upstream's eager handler
// and the lazy one: the discovery and every document, JSON and protobuf, must
// be the same bytes, and a built document must be let go after keep.
func TestLazyOpenAPIV3(t *testing.T) {
	roots := []string{"/api/v1", "/apis/widgets.example.com/v1", "/apis/widgets.example.com/v2"}
	container := restful.NewContainer()
	var services []*restful.WebService
	for _, root := range roots {
		ws := widgetService(root)
		container.Add(ws)
		services = append(services, ws)
	}
	// A group-version whose document cannot be built (a type without a
	// definition): upstream logs it and leaves it out of the discovery.
	broken := new(restful.WebService).Path("/apis/broken.example.com/v1")
	broken.Route(broken.GET("/gadgets").To(func(*restful.Request, *restful.Response) {}).Operation("listGadgets").Writes(struct{ Undefined int }{}))
	container.Add(broken)
	services = append(services, broken)
	upstream := mux.NewPathRecorderMux("upstream")
	routes.OpenAPI{V3Config: widgetConfig()}.InstallV3(container, upstream)
	// Kept an hour while the checks run (a loaded machine can take longer
	// than a short window between a request and the check of what is kept);
	// expiry is checked at the end with a short window.
	lazy := newLazyOpenAPIV3(widgetConfig(), services, time.Hour)
	ours := mux.NewPathRecorderMux("lazy")
	lazy.install(ours)

	want, got := call(t, upstream, "/openapi/v3", ""), call(t, ours, "/openapi/v3", "")
	if got.code != http.StatusOK || got.body != want.body {
		t.Fatalf("discovery: got %d %s, want %d %s", got.code, got.body, want.code, want.body)
	}
	var discovery handler3.OpenAPIV3Discovery
	if err := json.Unmarshal([]byte(got.body), &discovery); err != nil {
		t.Fatal(err)
	}
	if len(discovery.Paths) != len(roots) {
		t.Fatalf("discovery lists %d group-versions, want %d: %s", len(discovery.Paths), len(roots), got.body)
	}
	if n := len(lazy.recent); n != 0 {
		t.Errorf("%d documents kept after computing the discovery, want none", n)
	}

	for gv, entry := range discovery.Paths {
		for _, accept := range []string{"", "application/json", "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"} {
			want, got := call(t, upstream, entry.ServerRelativeURL, accept), call(t, ours, entry.ServerRelativeURL, accept)
			if got.code != http.StatusOK || got.body != want.body || got.etag != want.etag {
				t.Errorf("%s (Accept %q): got %d etag %s, %d bytes; upstream %d etag %s, %d bytes", gv, accept, got.code, got.etag, len(got.body), want.code, want.etag, len(want.body))
			}
			if accept == "" && !strings.Contains(got.body, `"chain.Widget"`) {
				t.Errorf("%s: the document has no Widget schema: %s", gv, got.body)
			}
		}
		stale := call(t, ours, "/openapi/v3/"+gv+"?hash=0", "")
		if stale.code != http.StatusMovedPermanently || stale.location != entry.ServerRelativeURL {
			t.Errorf("%s with a stale hash: %d to %q, want 301 to %q", gv, stale.code, stale.location, entry.ServerRelativeURL)
		}
	}
	for _, gv := range []string{"apis/nothing.example.com/v1", "apis/broken.example.com/v1"} {
		if got := call(t, ours, "/openapi/v3/"+gv, ""); got.code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", gv, got.code)
		}
	}

	lazy.mu.Lock()
	kept := len(lazy.recent)
	lazy.mu.Unlock()
	if kept != len(roots) {
		t.Errorf("%d documents kept right after their requests, want %d", kept, len(roots))
	}
	lazy.mu.Lock()
	lazy.keep = 100 * time.Millisecond
	lazy.mu.Unlock()
	for gv := range discovery.Paths {
		call(t, ours, discovery.Paths[gv].ServerRelativeURL, "") // restarts its time, now 100 ms
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		lazy.mu.Lock()
		defer lazy.mu.Unlock()
		kept = len(lazy.recent)
		return kept == 0, nil
	})
	if err != nil {
		t.Fatalf("%d documents still kept a minute after their last request, keep is 100 ms", kept)
	}
}

// TestLazyOpenAPIV3Kept checks the discovery kept across restarts: a second
// server with the same routes serves the first one's bytes without building
// a document, and one with other routes computes its own and replaces the file.
func TestLazyOpenAPIV3Kept(t *testing.T) {
	file := filepath.Join(t.TempDir(), openAPIV3DiscoveryFile)
	var builds atomic.Int32
	serve := func(roots ...string) (*lazyOpenAPIV3, answer) {
		config := widgetConfig()
		config.GetDefinitions = countingDefinitions(config.GetDefinitions, &builds)
		var services []*restful.WebService
		for _, root := range roots {
			services = append(services, widgetService(root))
		}
		broken := new(restful.WebService).Path("/apis/broken.example.com/v1")
		broken.Route(broken.GET("/gadgets").To(func(*restful.Request, *restful.Response) {}).Operation("listGadgets").Writes(struct{ Undefined int }{}))
		services = append(services, broken)
		l := newLazyOpenAPIV3(config, services, time.Hour)
		l.cacheFile = file
		m := mux.NewPathRecorderMux("lazy")
		l.install(m)
		return l, call(t, m, "/openapi/v3", "")
	}
	first, firstAnswer := serve("/api/v1", "/apis/widgets.example.com/v1")
	if firstAnswer.code != http.StatusOK || builds.Load() == 0 {
		t.Fatalf("first discovery: %d after %d builds", firstAnswer.code, builds.Load())
	}
	if _, ok := first.byGV["apis/broken.example.com/v1"]; ok {
		t.Errorf("the group-version whose document failed is still served")
	}
	kept, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the discovery was not kept: %v", err)
	}

	builds.Store(0)
	second, secondAnswer := serve("/api/v1", "/apis/widgets.example.com/v1")
	if secondAnswer.body != firstAnswer.body || builds.Load() != 0 {
		t.Errorf("restart with the same routes: %d builds, body %s; want none and %s", builds.Load(), secondAnswer.body, firstAnswer.body)
	}
	if _, ok := second.byGV["apis/broken.example.com/v1"]; ok {
		t.Errorf("after a restart, the group-version whose document failed is served")
	}

	builds.Store(0)
	_, third := serve("/api/v1", "/apis/widgets.example.com/v1", "/apis/widgets.example.com/v2")
	if builds.Load() == 0 || !strings.Contains(third.body, "widgets.example.com/v2") {
		t.Errorf("other routes: %d builds, body %s; want the discovery computed again with v2", builds.Load(), third.body)
	}
	if now, _ := os.ReadFile(file); string(now) == string(kept) {
		t.Errorf("the kept discovery was not replaced for the new routes")
	}
}
