package certs

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
)

// nodeClientStorePrefix is the kubelet's name for its client certificate
// store: <certDir>/kubelet-client-current.pem, a link to the current
// certificate and key in one PEM file, which the kubelet rotates itself.
const nodeClientStorePrefix = "kubelet-client"

// EnsureNodeClient gives the kubelet of a server that is its own node client
// credentials without a bootstrap token: a certificate for
// system:node:<node> in system:nodes, signed by the client CA, put where the
// kubelet's certificate store keeps its own (certDir), and a kubeconfig at
// kubeconfigPath that points at it and at server. A current certificate for
// the same node with more than a third of its life left is kept: the kubelet
// renews it through CSRs while it runs. It returns the store's current path.
func EnsureNodeClient(ctx context.Context, pki *PKI, node, certDir, kubeconfigPath, server string) (string, error) {
	logger := klog.FromContext(ctx)
	if err := ensureDir(certDir, true); err != nil {
		return "", err
	}
	store, err := certificate.NewFileStore(nodeClientStorePrefix, certDir, certDir, "", "")
	if err != nil {
		return "", fmt.Errorf("tls: node client certificate store %s: %w", certDir, err)
	}
	cn := "system:node:" + node
	now := time.Now()
	if cur, err := store.Current(); err == nil && cur.Leaf != nil && cur.Leaf.Subject.CommonName == cn && !dueForRenewal(cur.Leaf, now) {
		logger.V(1).Info("Reusing the node's client certificate", "node", node, "notAfter", cur.Leaf.NotAfter)
	} else {
		if err := checkMintClock(now, "the node's client certificate"); err != nil {
			return "", err
		}
		caCert, caKey, err := LoadKeyPair(pki.ClientCA)
		if err != nil {
			return "", err
		}
		key, keyPEM, err := newKey()
		if err != nil {
			return "", err
		}
		spec := &leafSpec{
			name: "node client", cn: cn, orgs: []string{"system:nodes"},
			ca:     &caState{name: "client CA", kp: pki.ClientCA, cert: caCert, key: caKey},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		_, certPEM, err := mintLeaf(spec, key.Public(), now, leafValidity)
		if err != nil {
			return "", err
		}
		if _, err := store.Update(certPEM, keyPEM); err != nil {
			return "", fmt.Errorf("tls: storing the node's client certificate: %w", err)
		}
		logger.Info("Issued the node's client certificate", "node", node)
	}
	current := store.CurrentPath()
	data, err := renderFileKubeconfig(server, pki.ServerCA.Cert, current, current, cn)
	if err != nil {
		return "", err
	}
	if old, err := os.ReadFile(kubeconfigPath); err != nil || string(old) != string(data) {
		if err := writeAtomic(kubeconfigPath, data, keyMode); err != nil {
			return "", err
		}
	}
	return current, nil
}
