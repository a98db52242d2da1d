package nodetoken

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
)

// Sentinel errors of Discover, for errors.Is.
var (
	// ErrCAMismatch: the server's CA is not the one the token pins. Nothing
	// should be written or retried: the server is not of that cluster.
	ErrCAMismatch = errors.New("the server's CA does not match the node token's pin")
	// ErrTokenUnknown: the server has no valid token of that ID (it expired
	// or was deleted), so cluster-info carries no signature for it.
	ErrTokenUnknown = errors.New("the server does not know the node token")
	// ErrBadSignature: cluster-info's signature for the token ID does not
	// verify with the token's secret.
	ErrBadSignature = errors.New("the cluster-info signature does not verify with the node token")
	// ErrUnreachable: the server could not be reached or is not serving yet;
	// retry with backoff.
	ErrUnreachable = errors.New("the server cannot be reached")
)

const (
	clusterInfoPath = "/api/v1/namespaces/" + "kube-public" + "/configmaps/" + bootstrapapi.ConfigMapClusterInfo
	maxBody         = 1 << 20
)

// signatureWait is how long Discover waits for the bootstrap signer to sign
// cluster-info for a token created a moment ago (a variable for tests).
var signatureWait = 5 * time.Second

// Discover returns the cluster CA (PEM) of the server at serverURL
// (https://host:port), trusted through the node token: cluster-info
// (kube-public) is read anonymously without trusting the server yet, its
// signature for the token ID is verified with the token secret, the CA in it
// is checked against the token's pin, and cluster-info is read again over a
// connection that trusts that CA and must be the same.
//
// Errors: ErrCAMismatch (naming both hashes), ErrTokenUnknown (expired or
// deleted token), ErrBadSignature, ErrUnreachable (retryable), or a
// non-retryable error saying what is wrong.
func Discover(ctx context.Context, serverURL string, tok Token) ([]byte, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server %q: want https://HOST:PORT", serverURL)
	}
	if tok.ID == "" || tok.Secret == "" {
		return nil, errors.New("the node token is empty")
	}
	if !tok.Pinned() {
		return nil, tok.verifyPin(nil)
	}
	insecure := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Not trusted yet: the CA comes from the signed cluster-info and the
		// token's pin, and the second read below verifies the server with it.
		InsecureSkipVerify: true, //nolint:gosec // see above
	}
	var (
		kubeconfig string
		lastErr    error
	)
	// Wait a moment for a signature: the bootstrap signer signs cluster-info
	// shortly after a token is created.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, signatureWait, true, func(ctx context.Context) (bool, error) {
		data, err := getClusterInfo(ctx, u.Host, insecure)
		if err != nil {
			return false, err
		}
		kubeconfig = data[bootstrapapi.KubeConfigKey]
		if kubeconfig == "" {
			return false, fmt.Errorf("%w: cluster-info at %s has no kubeconfig yet (the server is starting?)", ErrUnreachable, u.Host)
		}
		sig, ok := data[bootstrapapi.JWSSignatureKeyPrefix+tok.ID]
		if !ok {
			lastErr = fmt.Errorf("%w: the server at %s has no valid token with ID %s: it expired or was deleted. On a server, `edgeplane token list` shows the tokens and `edgeplane token create` makes a new one", ErrTokenUnknown, u.Host, tok.ID)
			return false, nil
		}
		if !jws.DetachedTokenIsValid(sig, kubeconfig, tok.ID, tok.Secret) {
			return false, fmt.Errorf("%w: the token's secret is wrong, or the server at %s is not the cluster's; check the token", ErrBadSignature, u.Host)
		}
		lastErr = nil
		return true, nil
	})
	if err != nil {
		if lastErr != nil && (errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err)) && ctx.Err() == nil {
			return nil, lastErr
		}
		return nil, err
	}
	caPEM, err := caOf(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster-info at %s: %w", u.Host, err)
	}
	if err := tok.verifyPin(caPEM); err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("cluster-info at %s: the CA is not a PEM certificate", u.Host)
	}
	secure := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: u.Hostname()}
	data, err := getClusterInfo(ctx, u.Host, secure)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal([]byte(data[bootstrapapi.KubeConfigKey]), []byte(kubeconfig)) {
		return nil, fmt.Errorf("cluster-info at %s changed between the unverified and the verified read; retry, and if it persists check what is between you and the server", u.Host)
	}
	return caPEM, nil
}

// caOf is the CA in cluster-info's kubeconfig, which has one cluster.
func caOf(kubeconfig string) ([]byte, error) {
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig does not parse: %w", err)
	}
	if len(cfg.Clusters) != 1 {
		return nil, fmt.Errorf("the kubeconfig has %d clusters, want 1", len(cfg.Clusters))
	}
	for _, c := range cfg.Clusters {
		if len(c.CertificateAuthorityData) == 0 {
			return nil, errors.New("the kubeconfig has no certificate-authority-data")
		}
		return c.CertificateAuthorityData, nil
	}
	return nil, nil // not reached
}

// getClusterInfo reads cluster-info's data anonymously from host.
func getClusterInfo(ctx context.Context, host string, tlsConfig *tls.Config) (map[string]string, error) {
	tr := &http.Transport{
		TLSClientConfig:     tlsConfig,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		Proxy:               nil,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+clusterInfoPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("the server at %s presents a certificate the cluster CA did not sign for that name (%v): --server must name the server by an address or name in its certificate (--tls-san), and nothing may stand in between", host, verr.Err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: reading cluster-info from %s: %v", ErrUnreachable, host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%w: reading cluster-info from %s: %v", ErrUnreachable, host, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: the server at %s has no cluster-info yet (starting?) or is not an edgeplane or kubeadm server", ErrUnreachable, host)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("the server at %s refuses anonymous reads of kube-public/cluster-info (HTTP %d): it is not an edgeplane server, or its cluster-info is not public", host, resp.StatusCode)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, fmt.Errorf("%w: the server at %s answered HTTP %d", ErrUnreachable, host, resp.StatusCode)
	default:
		return nil, fmt.Errorf("reading cluster-info from %s: HTTP %d", host, resp.StatusCode)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, fmt.Errorf("cluster-info from %s is not a ConfigMap: %w", host, err)
	}
	return cm.Data, nil
}
