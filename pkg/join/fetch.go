package join

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// Errors of Fetch that may pass with time, for a caller deciding whether to
// try again (errors.Is). Every other error of Fetch is final.
var (
	// ErrTokenRefused: the server answered 401 or 403. Its token may not
	// have reached the authenticator yet, or it is another cluster's.
	ErrTokenRefused = errors.New("refused the token")
	// ErrUnavailable: the server could not be reached (connection refused
	// or reset, a timeout) or answered that it cannot serve now (429, 5xx).
	ErrUnavailable = errors.New("server unavailable")
)

// Fetched is what a joining server gets from an existing one.
type Fetched struct {
	Data          Data
	EtcdEndpoints []string
	Token         Token // with the CA hash filled in
}

// Fetch reads the cluster's bootstrap data from the server at serverURL
// (https://host:6443). The bootstrap token it authenticates with is derived
// one-way from the join token, and the data is sealed with the token secret,
// so an impostor learns nothing and cannot forge data. Once the data is
// decrypted, the CA must match the token's pin and must have signed the
// certificate the server presented; otherwise Fetch refuses.
func Fetch(ctx context.Context, serverURL string, t Token) (*Fetched, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want https://host:port", serverURL)
	}
	var (
		mu   sync.Mutex
		peer []*x509.Certificate
	)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// Verified below, once the CA is known from the sealed data.
			InsecureSkipVerify: true, //nolint:gosec // see VerifyConnection and verifyServer
			VerifyConnection: func(cs tls.ConnectionState) error {
				mu.Lock()
				defer mu.Unlock()
				peer = cs.PeerCertificates
				return nil
			},
		},
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}
	defer tr.CloseIdleConnections()
	id, sec := BootstrapToken(t.Secret)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		u.Scheme+"://"+u.Host+"/api/v1/namespaces/kube-system/secrets/"+SecretName, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+id+"."+sec)
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the cluster's bootstrap data from %s: %w", u.Host, transportError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("fetching the cluster's bootstrap data from %s: %w", u.Host, transportError(err))
	}
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return nil, fmt.Errorf("the server at %s %w (HTTP %d): it is not this cluster's token, or that server was not started with --cluster-init or --server", u.Host, ErrTokenRefused, code)
	case code == http.StatusTooManyRequests, code >= 500:
		return nil, fmt.Errorf("fetching the cluster's bootstrap data from %s: %w: HTTP %d", u.Host, ErrUnavailable, code)
	default:
		return nil, fmt.Errorf("fetching the cluster's bootstrap data from %s: HTTP %d", u.Host, code)
	}
	var secret struct {
		Data map[string][]byte `json:"data"`
	}
	if err := json.Unmarshal(body, &secret); err != nil {
		return nil, fmt.Errorf("the bootstrap data from %s is not a Secret: %w", u.Host, err)
	}
	data, err := Open(secret.Data[keySealed], t.Secret)
	if err != nil {
		return nil, err
	}
	ca := data[ServerCAFile]
	if err := t.VerifyCA(ca); err != nil {
		return nil, err
	}
	mu.Lock()
	certs := peer
	mu.Unlock()
	if err := verifyServer(ca, certs, u.Hostname()); err != nil {
		return nil, fmt.Errorf("the server at %s is not a server of the cluster: %w", u.Host, err)
	}
	t.CAHash = CAHash(ca)
	return &Fetched{Data: data, EtcdEndpoints: splitURLs(string(secret.Data[keyEtcdEndpoints])), Token: t}, nil
}

// transportError marks err with ErrUnavailable when it may pass: nothing
// listens yet, the connection was dropped, or it timed out. A TLS or
// protocol error (not a TLS server, say) is left as it is: final.
func transportError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// verifyServer checks that the presented chain leads to the CA in caPEM.
func verifyServer(caPEM []byte, chain []*x509.Certificate, host string) error {
	if len(chain) == 0 {
		return errors.New("no certificate presented")
	}
	roots := x509.NewCertPool()
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return errors.New("the cluster CA is not PEM")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
	return err
}
