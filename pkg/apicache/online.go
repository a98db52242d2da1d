package apicache

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"k8s.io/klog/v2"
)

// maxReadBody bounds a read's response the cache keeps (a larger one is
// passed on, not kept); maxTokenBody a token request's body.
const (
	maxReadBody  = 16 << 20
	maxTokenBody = 64 << 10
)

// hopHeaders are not forwarded; nor are credentials and impersonation: the
// cache forwards as the node, whose certificate it checked.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization"}

func cleanHeaders(h http.Header) {
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for k := range h {
		if strings.HasPrefix(k, "Impersonate-") {
			h.Del(k)
		}
	}
}

// ServeHTTP answers one request of the node's parts.
func (c *Cache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case <-c.cfg.Upstream.Settled():
	case <-r.Context().Done():
		return
	}
	q := classify(r)
	online := c.cfg.Upstream.Online()
	switch q.action {
	case read:
		if q.info.Verb == "watch" {
			c.watch(w, r, q, online)
			return
		}
		c.read(w, r, q, online)
	case token:
		c.token(w, r, q, online)
	case podStatus:
		if online {
			c.forward(w, r)
			return
		}
		c.writeback(w, r, q)
	default:
		if !online {
			unavailable(w, "no API server answers; the node's cache answers reads only")
			return
		}
		c.forward(w, r)
	}
}

// upstreamURL is where requests go: the transport's dial picks the server.
func (c *Cache) upstreamURL(r *http.Request) *url.URL {
	return &url.URL{Scheme: "https", Host: c.cfg.ServerName, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
}

// forward passes r to the server as it is (but for credentials).
func (c *Cache) forward(w http.ResponseWriter, r *http.Request) {
	rp := &httputil.ReverseProxy{
		Transport:     c.transport,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = c.upstreamURL(pr.In)
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
			for k := range pr.Out.Header {
				if strings.HasPrefix(k, "Impersonate-") {
					pr.Out.Header.Del(k)
				}
			}
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			klog.FromContext(r.Context()).V(4).Info("Forwarding failed", "path", r.URL.Path, "err", err.Error())
			unavailable(w, "the API server did not answer: "+err.Error())
		},
	}
	rp.ServeHTTP(w, r)
}

// roundTrip sends r to the server asking for JSON, with body (may be nil).
func (c *Cache) roundTrip(r *http.Request, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, c.upstreamURL(r).String(), rd)
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	cleanHeaders(out.Header)
	out.Header.Set("Accept", "application/json")
	return c.transport.RoundTrip(out)
}

// copyHeaders writes resp's headers (but hop-by-hop and length) to w.
func copyHeaders(w http.ResponseWriter, resp *http.Response) {
	for k, vs := range resp.Header {
		if k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	cleanHeaders(w.Header())
}

// read forwards a get or list and keeps what it returns; offline, or when
// the server does not answer, it is answered from the cache.
func (c *Cache) read(w http.ResponseWriter, r *http.Request, q request, online bool) {
	logger := klog.FromContext(r.Context())
	if !online {
		c.serveCached(w, r, q)
		return
	}
	resp, err := c.roundTrip(r, nil)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		logger.V(4).Info("Reading from the API server failed: answered from the cache", "path", r.URL.Path, "err", err.Error())
		c.serveCached(w, r, q)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReadBody+1))
	if err != nil {
		if r.Context().Err() == nil {
			c.serveCached(w, r, q)
		}
		return
	}
	if len(body) <= maxReadBody {
		c.keepRead(logger, r, q, resp.StatusCode, body)
	}
	copyHeaders(w, resp)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	if len(body) > maxReadBody {
		_, _ = io.Copy(w, resp.Body)
	}
}

// keepRead keeps a get's object or a list's objects.
func (c *Cache) keepRead(logger klog.Logger, r *http.Request, q request, status int, body []byte) {
	if q.object != "" {
		switch status {
		case http.StatusOK:
			raw, _, err := normalize(body, "", "")
			if err == nil {
				c.store.putGet(logger, item{key: q.object, raw: raw})
			}
		case http.StatusNotFound:
			c.store.forgetGet(q.object)
		}
		return
	}
	if status != http.StatusOK {
		return
	}
	var l struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return
	}
	prefix, resource := resourceOfList(q.list)
	itemKind := strings.TrimSuffix(l.Kind, "List")
	items := make([]item, 0, len(l.Items))
	for _, raw := range l.Items {
		norm, m, err := normalize(raw, l.APIVersion, itemKind)
		if err != nil {
			return
		}
		items = append(items, item{key: objectKey(prefix, resource, m.Namespace, m.Name), raw: norm})
	}
	// A list read in pages is kept once its last page arrived.
	paged := r.URL.Query().Get("continue") != ""
	if paged || l.Metadata.Continue != "" {
		c.mu.Lock()
		p := c.pages[q.list]
		if !paged || p == nil {
			p = &pagedList{}
			c.pages[q.list] = p
		}
		p.items = append(p.items, items...)
		items = p.items
		if l.Metadata.Continue != "" {
			c.mu.Unlock()
			return
		}
		delete(c.pages, q.list)
		c.mu.Unlock()
	}
	c.store.putList(logger, q.list, l.APIVersion, l.Kind, l.Metadata.ResourceVersion, items)
}

// pagedList gathers a list's pages.
type pagedList struct{ items []item }

// token forwards a service account token request and keeps the response
// by service account and request; offline it answers with a kept response
// whose token is still valid.
func (c *Cache) token(w http.ResponseWriter, r *http.Request, q request, online bool) {
	logger := klog.FromContext(r.Context())
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenBody+1))
	if err != nil || len(body) > maxTokenBody {
		badRequest(w, "a token request's body could not be read or is too large")
		return
	}
	key := tokenKey(q.info.Namespace, q.info.Name, body)
	if online {
		resp, err := c.roundTrip(r, body)
		if err == nil {
			defer resp.Body.Close()
			out, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenBody))
			if err == nil {
				if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
					c.store.putToken(logger, key, out)
				}
				copyHeaders(w, resp)
				w.WriteHeader(resp.StatusCode)
				_, _ = w.Write(out)
				return
			}
		}
		if r.Context().Err() != nil {
			return
		}
	}
	raw, ok := c.store.token(key)
	if !ok {
		unavailable(w, "no API server answers and the node's cache holds no token for this request")
		return
	}
	if !tokenValid(raw) {
		c.store.dropToken(key)
		unavailable(w, "no API server answers and the token the node's cache holds for this request has expired")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(raw)
}

// unavailable answers 503 with a Status the node's clients read.
func unavailable(w http.ResponseWriter, msg string) {
	status(w, http.StatusServiceUnavailable, "ServiceUnavailable", msg)
}

func badRequest(w http.ResponseWriter, msg string) {
	status(w, http.StatusBadRequest, "BadRequest", msg)
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	// No Retry-After: client-go would retry at once, ten times, where
	// the node's parts have their own backoff.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": "edgeplane node API cache: " + msg, "reason": reason, "code": code,
	})
	_, _ = w.Write(b)
}
