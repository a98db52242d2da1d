package chain

import (
	"crypto/sha256"
	"crypto/x509"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// clientCertCache remembers who a client certificate authenticated as.
//
// The upstream x509 authenticator verifies the client certificate's chain
// on every request, although the TLS handshake has verified it already: the
// CA bundle may have been reloaded since, and the server also accepts
// certificates it does not trust (kubernetes/kubernetes#90533; a cache was
// proposed in #100902 and not merged). With ECDSA P-256 certificates that is
// ~80 µs of CPU per request, 7% of the process under a create load
// (docs/PERFORMANCE.md). The cache answers a request whose client
// certificate authenticated before, against the same CA bundle, with the
// answer the authenticators gave then. It serves only requests the x509
// authenticator decides: exactly one certificate, no Authorization header
// and no front-proxy user header (the front-proxy authenticator runs first),
// and it stores only answers for certificates it has verified itself against
// the client CA bundle. Each request gets its own copy of the answer. An
// answer expires after clientCertCacheTTL, when the certificate or its CA
// expires, and when the bundle is reloaded (the provider's verify options
// change). A certificate cannot be revoked in
// Kubernetes, so within those bounds the answer cannot change.
type clientCertCache struct {
	next          authenticator.Request
	verifyOptions func() (x509.VerifyOptions, bool)
	userHeaders   []string // the front-proxy authenticator's user headers
	now           func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]certAnswer

	hits, misses atomic.Int64
}

type certAnswer struct {
	resp    *authenticator.Response
	roots   *x509.CertPool // the bundle it was verified against
	expires time.Time
}

const (
	clientCertCacheTTL = 5 * time.Minute
	// clientCertCacheMax bounds the certificates remembered; when full, the
	// cache starts again empty. An edge cluster has a handful of clients.
	clientCertCacheMax = 1024
)

var _ authenticator.Request = (*clientCertCache)(nil)

func newClientCertCache(next authenticator.Request, verifyOptions func() (x509.VerifyOptions, bool), userHeaders []string) *clientCertCache {
	return &clientCertCache{next: next, verifyOptions: verifyOptions, userHeaders: userHeaders, now: time.Now,
		entries: map[[sha256.Size]byte]certAnswer{}}
}

func (c *clientCertCache) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if !c.decidedByCert(req) {
		return c.next.AuthenticateRequest(req)
	}
	opts, ok := c.verifyOptions()
	if !ok || opts.Roots == nil {
		return c.next.AuthenticateRequest(req)
	}
	leaf := req.TLS.PeerCertificates[0]
	key := sha256.Sum256(leaf.Raw)
	now := c.now()
	c.mu.Lock()
	a, found := c.entries[key]
	c.mu.Unlock()
	if found && a.roots == opts.Roots && now.Before(a.expires) && !now.Before(leaf.NotBefore) {
		c.hits.Add(1)
		return cloneResponse(a.resp), true, nil
	}

	c.misses.Add(1)
	resp, ok, err := c.next.AuthenticateRequest(req)
	if err != nil || !ok {
		return resp, ok, err
	}
	opts.CurrentTime = now
	chains, verr := leaf.Verify(opts)
	if verr != nil || len(chains) == 0 {
		// Authenticated by something other than the certificate.
		return resp, ok, err
	}
	expires := now.Add(clientCertCacheTTL)
	for _, chain := range chains {
		for _, cert := range chain {
			if cert.NotAfter.Before(expires) {
				expires = cert.NotAfter
			}
		}
	}
	c.mu.Lock()
	if len(c.entries) >= clientCertCacheMax {
		clear(c.entries)
	}
	// A copy: the caller owns resp and may change it in place.
	c.entries[key] = certAnswer{resp: cloneResponse(resp), roots: opts.Roots, expires: expires}
	c.mu.Unlock()
	return resp, ok, err
}

// cloneResponse copies r deeply, so that a request's handlers or an
// authenticator wrapped around the cache may change what they got in place
// (append a group, set an extra) without changing the remembered answer or
// another request's.
func cloneResponse(r *authenticator.Response) *authenticator.Response {
	if r == nil {
		return nil
	}
	out := &authenticator.Response{Audiences: slices.Clone(r.Audiences)}
	if r.User == nil {
		return out
	}
	var extra map[string][]string
	if e := r.User.GetExtra(); e != nil {
		extra = make(map[string][]string, len(e))
		for k, v := range e {
			extra[k] = slices.Clone(v)
		}
	}
	out.User = &user.DefaultInfo{
		Name:   r.User.GetName(),
		UID:    r.User.GetUID(),
		Groups: slices.Clone(r.User.GetGroups()),
		Extra:  extra,
	}
	return out
}

// decidedByCert says whether the x509 authenticator alone decides req:
// one client certificate, and nothing an authenticator before it (front
// proxy) or a token authenticator would read.
func (c *clientCertCache) decidedByCert(req *http.Request) bool {
	if req.TLS == nil || len(req.TLS.PeerCertificates) != 1 || req.Header.Get("Authorization") != "" {
		return false
	}
	for _, h := range c.userHeaders {
		if req.Header.Get(h) != "" {
			return false
		}
	}
	return true
}
