package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

func wantForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want Forbidden", what, err)
	}
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// clientCSR makes node's client certificate request as a joining node
// does, with client, and waits until it is denied or signed.
func clientCSR(t *testing.T, client kubernetes.Interface, name, node string, key *ecdsa.PrivateKey) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	req, err := nodeidentity.ClientRequest(key, node)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CSR %s: %v", name, err)
	}
	var csr *certificatesv1.CertificateSigningRequest
	eventually(t, time.Minute, "CSR "+name+" denied or signed", func(ctx context.Context) (bool, error) {
		csr, err = client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
				return true, nil
			}
		}
		return len(csr.Status.Certificate) > 0, nil
	})
	t.Logf("%s: %+v", name, csr.Status.Conditions)
	return csr
}

// waitCondition waits for the first condition of CSR name.
func waitCondition(t *testing.T, s *server, name string) certificatesv1.CertificateSigningRequestCondition {
	t.Helper()
	var cond certificatesv1.CertificateSigningRequestCondition
	eventually(t, time.Minute, "CSR "+name+" decided", func(ctx context.Context) (bool, error) {
		csr, err := s.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(csr.Status.Conditions) == 0 {
			return false, err
		}
		cond = csr.Status.Conditions[0]
		return true, nil
	})
	return cond
}

// selfSubject is who s says the client certificate certPEM (with key)
// authenticates.
func selfSubject(t *testing.T, s *server, certPEM []byte, key *ecdsa.PrivateKey) authenticationv1.UserInfo {
	t.Helper()
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(s.config)
	cfg.CertData, cfg.KeyData = certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("authenticating with the node's certificate: %v", err)
	}
	return review.Status.UserInfo
}

// createNodeWithAddresses creates a Node with addresses, as a kubelet
// registering does, and Ready.
func createNodeWithAddresses(t *testing.T, client kubernetes.Interface, name string, addrs ...corev1.NodeAddress) {
	t.Helper()
	ctx := context.Background()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node lifecycle controller updates a new Node too.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Addresses = addrs
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kubernetesEndpoint is the API server's address in the kubernetes
// Service's EndpointSlice.
func kubernetesEndpoint(t *testing.T, s *server) string {
	t.Helper()
	var addr string
	eventually(t, time.Minute, "the kubernetes Service's EndpointSlice", func(ctx context.Context) (bool, error) {
		list, err := s.client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return false, err
		}
		for _, sl := range list.Items {
			for _, e := range sl.Endpoints {
				if len(e.Addresses) > 0 {
					addr = e.Addresses[0]
				}
			}
		}
		return addr != "", nil
	})
	return addr
}
