package ingress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	pathpkg "path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Proxy is the HTTP handler of both listeners: it routes each request by
// the current Table to an endpoint of its backend.
type Proxy struct {
	table  atomic.Pointer[Table]
	rp     *httputil.ReverseProxy
	logger klog.Logger
	// fallback is the self-signed certificate of TLS connections whose
	// name no Ingress has a certificate for.
	fallback *tls.Certificate
}

// endpointKey carries the chosen endpoint from ServeHTTP to Rewrite.
type endpointKey struct{}

// Dialer dials backends (tests route addresses to local listeners).
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

// NewProxy makes a proxy with no routes; dial nil dials directly.
func NewProxy(logger klog.Logger, dial Dialer) (*Proxy, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	fallback, err := selfSigned()
	if err != nil {
		return nil, err
	}
	p := &Proxy{logger: logger, fallback: fallback}
	p.rp = &httputil.ReverseProxy{
		Rewrite: rewrite,
		Transport: &http.Transport{
			DialContext:           dial,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true,
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, context.Canceled) {
				logger.V(1).Info("Backend failed", "host", r.Host, "path", r.URL.Path, "endpoint", r.Context().Value(endpointKey{}), "err", err.Error())
			}
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("Bad Gateway\n"))
		},
		ErrorLog: nil,
	}
	return p, nil
}

// SetTable makes t the routing of the next requests.
func (p *Proxy) SetTable(t *Table) { p.table.Store(t) }

// ServeHTTP routes r.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	be := p.table.Load().Match(r.Host, r.URL.Path)
	if be == nil {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	ep := be.Pick()
	if ep == "" {
		http.Error(w, "no available server", http.StatusServiceUnavailable)
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), endpointKey{}, ep)))
}

// rewrite sends the request to the chosen endpoint with the client's Host
// and the X-Forwarded-* headers of this hop (those the client sent are
// dropped: it is not trusted to name itself).
func rewrite(pr *httputil.ProxyRequest) {
	ep, _ := pr.In.Context().Value(endpointKey{}).(string)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = ep
	pr.Out.Host = pr.In.Host
	pr.SetXForwarded()
	if ip, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		pr.Out.Header.Set("X-Real-Ip", ip)
	}
	port := "80"
	if pr.In.TLS != nil {
		port = "443"
	}
	if la, ok := pr.In.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, p, err := net.SplitHostPort(la.String()); err == nil {
			port = p
		}
	}
	pr.Out.Header.Set("X-Forwarded-Port", port)
}

// GetCertificate chooses the certificate of a TLS connection: the one of
// an Ingress TLS entry naming the host, else of a wildcard entry, else one
// of an entry without hosts whose certificate holds the name, else the
// self-signed fallback.
func (p *Proxy) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	t := p.table.Load()
	if t == nil {
		return p.fallback, nil
	}
	name := normalizeHost(hello.ServerName)
	if c, ok := t.certs[name]; ok {
		return c, nil
	}
	if _, suffix, ok := strings.Cut(name, "."); ok {
		if c, ok := t.certs["*."+suffix]; ok {
			return c, nil
		}
	}
	for _, c := range t.bySAN {
		if c.Leaf != nil && c.Leaf.VerifyHostname(name) == nil {
			return c, nil
		}
	}
	return p.fallback, nil
}

// TLSConfig is the HTTPS listener's: TLS 1.2 or later, certificates by
// GetCertificate.
func (p *Proxy) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: p.GetCertificate}
}

// selfSigned makes the fallback certificate, in memory, for a year.
func selfSigned() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "edgeplane ingress default certificate"},
		DNSNames:     []string{"edgeplane-ingress.default"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// ParseCert reads a kubernetes.io/tls Secret's data into a certificate.
func ParseCert(data map[string][]byte) (*tls.Certificate, error) {
	crt, key := data["tls.crt"], data["tls.key"]
	if len(crt) == 0 || len(key) == 0 {
		return nil, errors.New("it has no tls.crt or no tls.key")
	}
	c, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	return &c, nil // Leaf is set by X509KeyPair (Go 1.23+)
}

func cleanSlashPath(p string) string { return pathpkg.Clean(p) }

func portOf(addr net.Addr) int32 {
	if addr == nil {
		return 0
	}
	_, p, err := net.SplitHostPort(addr.String())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return int32(n)
}
