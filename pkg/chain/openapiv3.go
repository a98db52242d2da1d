package chain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	restful "github.com/emicklei/go-restful/v3"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/klog/v2"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/handler3"
)

// openAPIV3Keep is how long a group-version's document, once asked for, stays
// built: kubectl asks for a few in a row, then caches them on disk by hash.
const openAPIV3Keep = time.Minute

// lazyOpenAPIV3 serves the kube-apiserver's /openapi/v3 without keeping its
// documents. Upstream builds the document of every group-version at start
// and keeps it, with its JSON once anyone reads the discovery (the
// aggregator does at start): ~15 MB of live heap for documents that a client
// reads once and then caches by hash. Here each document is built by
// upstream's own code (routes.OpenAPI.InstallV3 on a container holding just
// that group-version), so what is served is byte for byte upstream's; the
// discovery's hashes are computed once, one document at a time, and a
// document asked for is kept openAPIV3Keep after its last request.
type lazyOpenAPIV3 struct {
	config *openapicommon.OpenAPIV3Config
	byGV   map[string]*restful.WebService // "api/v1", "apis/apps/v1", ...
	keep   time.Duration
	// cacheFile keeps the discovery across restarts (openapiv3cache.go);
	// empty: computed at every start.
	cacheFile string

	build     sync.Mutex // one build at a time: builder3 fills in config on first use
	discovery struct {
		once sync.Once
		body []byte
		err  error
	}
	mu     sync.Mutex
	recent map[string]*builtOpenAPIV3
}

// builtOpenAPIV3 is one group-version's upstream handler, dropped when its
// timer fires.
type builtOpenAPIV3 struct {
	service *handler3.OpenAPIService
	drop    *time.Timer
}

// installOpenAPI installs on the kube-apiserver what its PrepareRun would have
// (tune sets SkipOpenAPIInstallation there): upstream's OpenAPI v2 built on
// its first request when enabled, and the lazy v3.
func installOpenAPI(s *genericapiserver.GenericAPIServer, v2 *openapicommon.Config, v3 *openapicommon.OpenAPIV3Config, stateDir string) {
	if v2 != nil {
		s.OpenAPIVersionedService = installLazyOpenAPIV2(v2, s.Handler.GoRestfulContainer, s.Handler.NonGoRestfulMux)
	}
	if v3 != nil {
		l := newLazyOpenAPIV3(v3, s.Handler.GoRestfulContainer.RegisteredWebServices(), openAPIV3Keep)
		l.cacheFile = filepath.Join(stateDir, openAPIV3DiscoveryFile)
		l.install(s.Handler.NonGoRestfulMux)
	}
}

func newLazyOpenAPIV3(config *openapicommon.OpenAPIV3Config, services []*restful.WebService, keep time.Duration) *lazyOpenAPIV3 {
	l := &lazyOpenAPIV3{config: config, byGV: map[string]*restful.WebService{}, keep: keep, recent: map[string]*builtOpenAPIV3{}}
	for _, ws := range services {
		// As upstream's InstallV3: the root path without its leading "/".
		l.byGV[strings.TrimPrefix(ws.RootPath(), "/")] = ws
	}
	return l
}

func (l *lazyOpenAPIV3) install(m *mux.PathRecorderMux) {
	m.Handle("/openapi/v3", http.HandlerFunc(l.serveDiscovery))
	m.HandlePrefix("/openapi/v3/", http.HandlerFunc(l.serveGroupVersion))
}

// buildGroupVersion builds one group-version's upstream handler.
func (l *lazyOpenAPIV3) buildGroupVersion(gv string) *handler3.OpenAPIService {
	container := restful.NewContainer()
	container.Add(l.byGV[gv])
	l.build.Lock()
	defer l.build.Unlock()
	return routes.OpenAPI{V3Config: l.config}.InstallV3(container, mux.NewPathRecorderMux("openapi-v3-"+gv))
}

// discoveryBody is the /openapi/v3 document: each group-version's URL with the
// hash of its document, as upstream's handler writes it.
func (l *lazyOpenAPIV3) discoveryBody() ([]byte, error) {
	l.discovery.once.Do(func() {
		key := l.discoveryKey()
		if body, ok := loadDiscovery(l.cacheFile, key); ok && l.keepListed(body) {
			l.discovery.body = body
			return
		}
		defer func() {
			if l.discovery.err == nil {
				storeDiscovery(l.cacheFile, key, l.discovery.body)
			}
		}()
		gvs := make([]string, 0, len(l.byGV))
		for gv := range l.byGV {
			gvs = append(gvs, gv)
		}
		sort.Strings(gvs)
		merged := handler3.OpenAPIV3Discovery{Paths: make(map[string]handler3.OpenAPIV3DiscoveryGroupVersion, len(gvs))}
		for _, gv := range gvs {
			one, err := discoveryOf(l.buildGroupVersion(gv))
			if err != nil {
				l.discovery.err = fmt.Errorf("OpenAPI v3 of %s: %w", gv, err)
				return
			}
			entry, ok := one.Paths[gv]
			if !ok {
				// Its document failed to build (InstallV3 logged why):
				// left out, as upstream leaves it out.
				delete(l.byGV, gv)
				continue
			}
			merged.Paths[gv] = entry
		}
		l.discovery.body, l.discovery.err = json.Marshal(&merged)
	})
	return l.discovery.body, l.discovery.err
}

// keepListed drops from byGV the group-versions a kept discovery body leaves
// out (their documents failed to build), as computing it does; false when
// the body does not parse.
func (l *lazyOpenAPIV3) keepListed(body []byte) bool {
	var d handler3.OpenAPIV3Discovery
	if json.Unmarshal(body, &d) != nil {
		return false
	}
	for gv := range l.byGV {
		if _, ok := d.Paths[gv]; !ok {
			delete(l.byGV, gv)
		}
	}
	return true
}

func (l *lazyOpenAPIV3) serveDiscovery(w http.ResponseWriter, r *http.Request) {
	body, err := l.discoveryBody()
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Serving the OpenAPI v3 discovery")
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func (l *lazyOpenAPIV3) serveGroupVersion(w http.ResponseWriter, r *http.Request) {
	// After the discovery, byGV holds only the group-versions it lists.
	if _, err := l.discoveryBody(); err != nil {
		klog.FromContext(r.Context()).Error(err, "Serving an OpenAPI v3 document")
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	gv := strings.TrimPrefix(r.URL.Path, "/openapi/v3/")
	if _, ok := l.byGV[gv]; !ok {
		http.NotFound(w, r)
		return
	}
	l.groupVersion(gv).HandleGroupVersion(w, r)
}

// groupVersion returns gv's handler, built now or kept from a request less
// than keep ago; each request restarts the time it is kept.
func (l *lazyOpenAPIV3) groupVersion(gv string) *handler3.OpenAPIService {
	l.mu.Lock()
	if b, ok := l.recent[gv]; ok {
		b.drop.Reset(l.keep)
		l.mu.Unlock()
		return b.service
	}
	l.mu.Unlock()
	service := l.buildGroupVersion(gv)
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.recent[gv]; ok { // built meanwhile by another request
		b.drop.Reset(l.keep)
		return b.service
	}
	b := &builtOpenAPIV3{service: service}
	b.drop = time.AfterFunc(l.keep, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.recent[gv] == b {
			delete(l.recent, gv)
		}
	})
	l.recent[gv] = b
	return service
}

// discoveryOf is what an upstream handler's /openapi/v3 discovery lists: its
// group-versions' URLs, with their documents' hashes.
func discoveryOf(service *handler3.OpenAPIService) (handler3.OpenAPIV3Discovery, error) {
	var d handler3.OpenAPIV3Discovery
	w := &bufferedResponse{header: http.Header{}, code: http.StatusOK}
	service.HandleDiscovery(w, &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/openapi/v3"}, Header: http.Header{}})
	if w.code != http.StatusOK {
		return d, fmt.Errorf("discovery: %d %s", w.code, strings.TrimSpace(w.body.String()))
	}
	return d, json.Unmarshal(w.body.Bytes(), &d)
}

// bufferedResponse is the http.ResponseWriter that discoveryOf hands to the handler.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }
