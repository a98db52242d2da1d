package node

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// identity is a node's identity key and its fingerprint.
type identity struct {
	key         *ecdsa.PrivateKey
	fingerprint string
}

// clientUsages are what a node's client certificate is for, as the
// kubelet's own requests ask.
var clientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

// approvalLog is how often a request that is still pending is logged.
const approvalLog = time.Minute

// enrollWait bounds an enrollment: the node runs anyway, and tries again
// at its next start.
const enrollWait = 2 * time.Minute

// bootstrapClientCert asks, with the node token (client), for a client
// certificate of the node's identity key, waits for it, and installs it in
// the kubelet's certificate store with a kubeconfig for server. A refusal
// is an error that carries the server's reason.
func bootstrapClientCert(ctx context.Context, client kubernetes.Interface, node string, p Paths, server string) error {
	logger := klog.FromContext(ctx)
	id, err := loadIdentity(p)
	if err != nil {
		return err
	}
	certPEM, err := requestClientCert(ctx, client, node, id, nil)
	if err != nil {
		return fmt.Errorf("node %s: the server did not issue the node's client certificate: %w", node, err)
	}
	if err := installClientCert(p, server, certPEM, id); err != nil {
		return err
	}
	if err := markIdentityBound(p, id.fingerprint); err != nil {
		return err
	}
	logger.Info("The node has its client certificate", "node", node, "identity", id.fingerprint)
	return nil
}

// installClientCert puts certPEM and the identity key in the kubelet's
// client certificate store and points the node's kubeconfig at it.
func installClientCert(p Paths, server string, certPEM []byte, id identity) error {
	keyPEM, err := nodeidentity.KeyPEM(id.key)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	store, err := clientCertStore(p)
	if err != nil {
		return err
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		return fmt.Errorf("node: storing the client certificate: %w", err)
	}
	return writeKubeconfig(p, server, p.ServerCA, store.CurrentPath())
}

// enroll records the node's identity with the server when the node has
// not recorded that it is bound (a node that joined before identities were
// recorded): a client certificate request as itself, signed with its
// identity key and labelled for enrollment. It runs beside a working node,
// so a failure is logged and tried again at the next start.
func enroll(ctx context.Context, client kubernetes.Interface, node string, p Paths, server string) {
	logger := klog.FromContext(ctx)
	id, err := loadIdentity(p)
	if err != nil {
		logger.Error(err, "The node's identity is not recorded with the server; trying again at the next start")
		return
	}
	if identityBound(p, id.fingerprint) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, enrollWait)
	defer cancel()
	certPEM, err := requestClientCert(ctx, client, node, id, map[string]string{nodeidentity.EnrollLabel: nodeidentity.EnrollValue})
	if err == nil {
		err = installClientCert(p, server, certPEM, id)
	}
	if err == nil {
		err = markIdentityBound(p, id.fingerprint)
	}
	if err != nil {
		logger.Error(err, "The node's identity is not recorded with the server; trying again at the next start", "node", node)
		return
	}
	logger.Info("Recorded the node's identity with the server", "node", node, "identity", id.fingerprint)
}

// requestClientCert creates a client certificate request for node signed
// by id's key and waits for the certificate, logging once a minute while it
// is pending.
func requestClientCert(ctx context.Context, client kubernetes.Interface, node string, id identity, labels map[string]string) ([]byte, error) {
	logger := klog.FromContext(ctx)
	req, err := nodeidentity.ClientRequest(id.key, node)
	if err != nil {
		return nil, err
	}
	obj := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-" + node + "-", Labels: labels},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    req,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     clientUsages,
		},
	}
	created, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the certificate signing request: %w", err)
	}
	logger.V(1).Info("Asked for the node's client certificate", "csr", created.Name)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, approvalLog)
		cert, err := csr.WaitForCertificate(waitCtx, client, created.Name, created.UID)
		pending := waitCtx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return cert, nil
		case ctx.Err() != nil:
			return nil, fmt.Errorf("certificate signing request %s still pending: %w", created.Name, ctx.Err())
		case !pending:
			return nil, err // denied, failed, or deleted: the error says which
		}
		logger.Info("Waiting for the server to decide the node's certificate signing request", "csr", created.Name)
	}
}
