package node

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/controller/certificates/signer"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// joinFixture is a real API server with node tokens enabled, upstream's
// kubelet client signer running on its client CA, and a node token.
type joinFixture struct {
	srv   *testapiserver.Server
	admin kubernetes.Interface
	boot  kubernetes.Interface
	host  string
}

func newJoinFixture(t *testing.T, ctx context.Context) *joinFixture {
	t.Helper()
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	if err := controllers.EnsureNodeBootstrapRBAC(ctx, admin); err != nil {
		t.Fatal(err)
	}
	tok, err := nodetoken.Create(ctx, admin, nodetoken.CreateOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The controller-manager's kubelet client signer, upstream's own.
	factory := informers.NewSharedInformerFactory(admin, 0)
	sc, err := signer.NewKubeletClientCSRSigningController(ctx, admin, factory.Certificates().V1().CertificateSigningRequests(),
		srv.PKI.ClientCA.Cert, srv.PKI.ClientCA.Key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sc.Run(runCtx, 1) }()
	factory.Start(runCtx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown(); <-done })

	cfg, err := kubeclient.Config(srv.Kubeconfig, "test", kubeclient.Steady)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := kubernetes.NewForConfig(&rest.Config{Host: cfg.Host, BearerToken: tok.BootstrapToken(),
		TLSClientConfig: rest.TLSClientConfig{CAFile: srv.PKI.ServerCA.Cert}})
	if err != nil {
		t.Fatal(err)
	}
	return &joinFixture{srv: srv, admin: admin, boot: boot, host: cfg.Host}
}

// decideNext sets the condition of the next client certificate request as
// the server's approver would.
func (f *joinFixture) decideNext(t *testing.T, ctx context.Context, approve bool, message string) <-chan *certificatesv1.CertificateSigningRequest {
	t.Helper()
	w, err := f.admin.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *certificatesv1.CertificateSigningRequest, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			csr, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if !ok || ev.Type != watch.Added || len(csr.Status.Conditions) > 0 {
				continue // a watch from now lists what exists first: the earlier, decided requests
			}
			typ := certificatesv1.CertificateDenied
			if approve {
				typ = certificatesv1.CertificateApproved
			}
			csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: typ, Status: corev1.ConditionTrue, Reason: "Test", Message: message,
			})
			if _, err := f.admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
				t.Errorf("deciding %s: %v", csr.Name, err)
			}
			seen <- csr
			return
		}
	}()
	return seen
}

// TestBootstrapClientCert: the node asks with its token for a client
// certificate of its identity key before anything of it starts; once the
// server approves, the node's kubeconfig authenticates it as
// system:node:<name>, its identity key is kept 0600, and the token is
// written nowhere. A denial ends the join with the server's reason and
// leaves no credentials behind.
func TestBootstrapClientCert(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the API server")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	f := newJoinFixture(t, ctx)

	t.Run("approved", func(t *testing.T) {
		p := PathsIn(t.TempDir())
		if err := writeFile(p.ServerCA, mustRead(t, f.srv.PKI.ServerCA.Cert), 0o644); err != nil {
			t.Fatal(err)
		}
		seen := f.decideNext(t, ctx, true, "")
		if err := bootstrapClientCert(ctx, f.boot, "edge-a", p, f.host); err != nil {
			t.Fatal(err)
		}
		csr := <-seen
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(csr.Spec.Username, "system:bootstrap:") {
			t.Errorf("request signer %q by %q, want the kubelet client signer, asked by the token", csr.Spec.SignerName, csr.Spec.Username)
		}
		key, err := nodeidentity.LoadKey(p.IdentityKey)
		if err != nil {
			t.Fatal(err)
		}
		req, err := parseRequestPEM(csr.Spec.Request)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := nodeidentity.Fingerprint(key.Public())
		if got, _ := nodeidentity.Fingerprint(req.PublicKey); got != want {
			t.Errorf("request signed by key %s, want the identity key %s", got, want)
		}
		if fi, err := os.Stat(p.IdentityKey); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("identity key mode %v (%v), want 0600", fi.Mode().Perm(), err)
		}
		if !identityBound(p, want) {
			t.Error("the node did not record that its identity is bound")
		}
		if st, err := loadCredentials(p, time.Now()); err != nil || st != credValid {
			t.Fatalf("credentials after the join: %v, %v", st, err)
		}
		client, err := kubeclient.New(p.Kubeconfig, "test", kubeclient.Steady)
		if err != nil {
			t.Fatal(err)
		}
		who, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u := who.Status.UserInfo.Username; u != "system:node:edge-a" {
			t.Errorf("the node's kubeconfig authenticates as %q, want system:node:edge-a", u)
		}
		for _, path := range []string{p.Kubeconfig, staleBootstrapKubeconfig(p)} {
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), "token:") {
				t.Errorf("%s holds a token", path)
			}
		}
	})

	t.Run("denied", func(t *testing.T) {
		p := PathsIn(t.TempDir())
		if err := writeFile(p.ServerCA, mustRead(t, f.srv.PKI.ServerCA.Cert), 0o644); err != nil {
			t.Fatal(err)
		}
		const why = "node edge-a is bound to another identity: run `edgeplane node forget edge-a`"
		f.decideNext(t, ctx, false, why)
		err := bootstrapClientCert(ctx, f.boot, "edge-a", p, f.host)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Fatalf("join = %v, want the server's reason %q", err, why)
		}
		if st, err := loadCredentials(p, time.Now()); err != nil || st != credNone {
			t.Fatalf("credentials after a denied join: %v, %v; want none", st, err)
		}
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseRequestPEM(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}
