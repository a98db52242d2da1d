package node

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate"
)

// Credentials give a node its client certificate and kubeconfig before any
// of its components starts (the kubelet does no TLS bootstrap of its own),
// and tell it the cluster's settings for nodes. An agent joins with a node
// token (TokenJoin); a server that is its own node mints them from its CA
// (LocalCA).
type Credentials interface {
	// Ensure leaves a kubeconfig with the node's client certificate at
	// p.Kubeconfig and returns the cluster's settings for the node.
	Ensure(ctx context.Context, node string, p Paths) (Cluster, error)
}

// clientCertPrefix is the kubelet's name for its client certificate store:
// <CertDir>/kubelet-client-current.pem, a link to the current certificate
// and key in one file, which the kubelet rotates itself.
const clientCertPrefix = "kubelet-client"

// clientCertStore is the kubelet's client certificate store of p.
func clientCertStore(p Paths) (certificate.FileStore, error) {
	if err := os.MkdirAll(p.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	store, err := certificate.NewFileStore(clientCertPrefix, p.CertDir, p.CertDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("node: client certificate store %s: %w", p.CertDir, err)
	}
	return store, nil
}

// credState is what a node's directory holds of its credentials.
type credState int

const (
	// credNone: no kubeconfig (a first join, or one interrupted before
	// its end).
	credNone credState = iota
	// credExpired: a kubeconfig whose client certificate has expired (the
	// node was off longer than its certificate lived): join again.
	credExpired
	// credValid: a kubeconfig with a current client certificate.
	credValid
)

// clockSkew is how far a certificate's NotBefore may lie in the future
// before the clock, not the certificate, is taken to be wrong.
const clockSkew = 5 * time.Minute

// loadCredentials tells what the node's kubeconfig holds. Anything there
// that cannot be read is an error naming the file and the fix, never a
// silent fallback to the token: a token join would take the node's name
// again, which the server refuses for a node it knows unless the node
// proves its identity.
func loadCredentials(p Paths, now time.Time) (credState, error) {
	if _, err := os.Stat(p.Kubeconfig); errors.Is(err, os.ErrNotExist) {
		return credNone, nil
	} else if err != nil {
		return 0, fmt.Errorf("node credentials: %w", err)
	}
	fix := fmt.Sprintf("remove %s to join again with the node token", p.Kubeconfig)
	cfg, err := clientcmd.LoadFromFile(p.Kubeconfig)
	if err != nil {
		return 0, fmt.Errorf("node credentials: %s does not parse (%v): %s", p.Kubeconfig, err, fix)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	if cur == nil || cfg.AuthInfos[cur.AuthInfo] == nil || cfg.AuthInfos[cur.AuthInfo].ClientCertificate == "" {
		return 0, fmt.Errorf("node credentials: %s names no client certificate file in its current context: %s", p.Kubeconfig, fix)
	}
	certFile := cfg.AuthInfos[cur.AuthInfo].ClientCertificate
	data, err := os.ReadFile(certFile)
	if err != nil {
		return 0, fmt.Errorf("node credentials: the client certificate of %s: %w: %s", p.Kubeconfig, err, fix)
	}
	cert, err := firstCertificate(data)
	if err != nil {
		return 0, fmt.Errorf("node credentials: %s: %v: %s", certFile, err, fix)
	}
	switch {
	case now.After(cert.NotAfter):
		return credExpired, nil
	case now.Add(clockSkew).Before(cert.NotBefore):
		return 0, fmt.Errorf("node credentials: %s is valid only from %s, and the clock says %s: set the clock (a board without a real-time clock needs NTP before edgeplane starts)",
			certFile, cert.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return credValid, nil
}

// firstCertificate parses the first CERTIFICATE block of PEM data.
func firstCertificate(data []byte) (*x509.Certificate, error) {
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
	return nil, errors.New("no PEM certificate in it")
}
