package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"k8s.io/client-go/util/retry"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestControllers checks what the in-process controller-manager and scheduler
// do for a user: one server per datastore (all cases on SQLite, the
// Deployment, namespace and garbage-collector cases on etcd), then a server
// with both turned off.
func TestControllers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real server")
	}
	parallel(t, 35*time.Second)
	for _, ds := range datastoreCases {
		t.Run(ds, func(t *testing.T) {
			dir := t.TempDir()
			s := startServer(t, dir, "--datastore", ds)
			t.Run("deployment makes a replicaset and pods", func(t *testing.T) { testDeploymentPods(t, s) })
			t.Run("namespace deletion finishes", func(t *testing.T) { testNamespaceDeletion(t, s) })
			t.Run("garbage collector removes dependents", func(t *testing.T) { testGarbageCollection(t, s) })
			if ds == "sqlite" {
				t.Run("service account and token", func(t *testing.T) { testServiceAccount(t, s, dir) })
				t.Run("scheduler binds to a ready node", func(t *testing.T) { testScheduling(t, s) })
				t.Run("bootstrap token CSR is approved and signed", func(t *testing.T) { testKubeletCSR(t, s, dir) })
			}
			s.stop()
		})
	}
	t.Run("disabled", func(t *testing.T) { testDisabled(t) })
	t.Run("bad flags", func(t *testing.T) {
		out, code := runToExit(t, t.TempDir(), "--disable", "scheduler,telemetry", "--cluster-cidr", "10.43.0.0/25",
			"--allocate-node-cidrs")
		wantExit(t, code, out)
		for _, want := range []string{`--disable "telemetry" is not one of: controller-manager, scheduler, kubelet`,
			"--cluster-cidr 10.43.0.0/25 overlaps --service-cidr 10.43.0.0/16", "smaller than one node's /24", "3 problems"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
}

// newNamespace creates a namespace for one subtest and waits for its default
// ServiceAccount, without which admission rejects Pods.
func newNamespace(t *testing.T, s *server, name string) {
	t.Helper()
	createNamespace(t, s, name)
	eventually(t, time.Minute, "the default ServiceAccount in "+name, func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func createNamespace(t *testing.T, s *server, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := s.client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mustKubectl(t *testing.T, s *server, args ...string) string {
	t.Helper()
	out, err := s.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// podsWithLabel counts the Pods of an app label in ns.
func podsWithLabel(ctx context.Context, s *server, ns, app string) (int, error) {
	pods, err := s.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return 0, err
	}
	return len(pods.Items), nil
}

// testDeploymentPods is the first thing a user tries, in namespace default.
func testDeploymentPods(t *testing.T, s *server) {
	begin := time.Now()
	mustKubectl(t, s, "create", "deployment", "web", "--image=nginx", "--replicas=2")
	eventually(t, time.Minute, "a ReplicaSet and 2 Pods", func(ctx context.Context) (bool, error) {
		rss, err := s.client.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(rss.Items) != 1 {
			return false, err
		}
		n, err := podsWithLabel(ctx, s, "default", "web")
		return n == 2, err
	})
	t.Logf("ReplicaSet and 2 Pods after %s", time.Since(begin).Round(time.Millisecond))
}

func testNamespaceDeletion(t *testing.T, s *server) {
	ctx := context.Background()
	newNamespace(t, s, "x")
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}
		if _, err := s.client.CoreV1().ConfigMaps("x").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustKubectl(t, s, "-n", "x", "create", "deployment", "doomed", "--image=nginx", "--replicas=2")
	eventually(t, time.Minute, "the Deployment's Pods", func(ctx context.Context) (bool, error) {
		n, err := podsWithLabel(ctx, s, "x", "doomed")
		return n == 2, err
	})
	begin := time.Now()
	// kubectl waits for the namespace to be gone.
	mustKubectl(t, s, "delete", "namespace", "x", "--timeout=60s")
	eventually(t, time.Until(begin.Add(60*time.Second)), "namespace x to be gone", func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().Namespaces().Get(ctx, "x", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("namespace gone after %s", time.Since(begin).Round(time.Millisecond))
}

func testGarbageCollection(t *testing.T, s *server) {
	newNamespace(t, s, "gc")
	mustKubectl(t, s, "-n", "gc", "create", "deployment", "owner", "--image=nginx", "--replicas=2")
	eventually(t, time.Minute, "the Deployment's Pods", func(ctx context.Context) (bool, error) {
		n, err := podsWithLabel(ctx, s, "gc", "owner")
		return n == 2, err
	})
	// Default propagation for a Deployment: background.
	if err := s.client.AppsV1().Deployments("gc").Delete(context.Background(), "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	eventually(t, 30*time.Second, "the ReplicaSet and Pods to be collected", func(ctx context.Context) (bool, error) {
		rss, err := s.client.AppsV1().ReplicaSets("gc").List(ctx, metav1.ListOptions{})
		if err != nil || len(rss.Items) != 0 {
			return false, err
		}
		pods, err := s.client.CoreV1().Pods("gc").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, err
	})
	t.Logf("dependents collected after %s", time.Since(begin).Round(time.Millisecond))
}

func testServiceAccount(t *testing.T, s *server, dir string) {
	ctx := context.Background()
	newNamespace(t, s, "sa") // waits for the default ServiceAccount
	eventually(t, time.Minute, "kube-root-ca.crt holding the cluster CA", func(ctx context.Context) (bool, error) {
		cm, err := s.client.CoreV1().ConfigMaps("sa").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data["ca.crt"] == readFile(t, filepath.Join(dir, "tls", "server-ca.crt")), nil
	})
	token := strings.TrimSpace(mustKubectl(t, s, "-n", "sa", "create", "token", "default"))
	if strings.Count(token, ".") != 2 {
		t.Fatalf("kubectl create token printed %q, not a JWT", token)
	}
	// The token authenticates as the service account.
	cfg := anonymousConfig(s)
	cfg.BearerToken = token
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().
		Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("authenticate with the token: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:sa:default"; got != want {
		t.Fatalf("token authenticates as %q, want %q", got, want)
	}
}

func testScheduling(t *testing.T, s *server) {
	ctx := context.Background()
	if _, err := s.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("2"),
		corev1.ResourceMemory: resource.MustParse("4Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	// The node lifecycle controller writes to a new Node too: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := s.client.CoreV1().Nodes().Get(ctx, "edge-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Capacity, node.Status.Allocatable = res, res
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	newNamespace(t, s, "sched")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
	}
	if _, err := s.client.CoreV1().Pods("sched").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	eventually(t, time.Minute, "the Pod to be bound to edge-1", func(ctx context.Context) (bool, error) {
		p, err := s.client.CoreV1().Pods("sched").Get(ctx, "p", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "edge-1", err
	})
	t.Logf("bound after %s", time.Since(begin).Round(time.Millisecond))
}

func testKubeletCSR(t *testing.T, s *server, dir string) {
	ctx := context.Background()
	// A bootstrap token, as `kubeadm token create` makes one.
	id, secret := "abcdef", "0123456789abcdef"
	tokenSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id": id, "token-secret": secret,
			"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
			"expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		},
	}
	if _, err := s.client.CoreV1().Secrets("kube-system").Create(ctx, tokenSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := anonymousConfig(s)
	cfg.BearerToken = id + "." + secret
	bootstrap := kubernetes.NewForConfigOrDie(cfg)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:edge-2", Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-csr-edge-2"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	// The token Secret may take a moment to reach the authenticator's cache.
	eventually(t, time.Minute, "the bootstrap token to create a CSR", func(ctx context.Context) (bool, error) {
		_, err := bootstrap.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	begin := time.Now()
	var issued []byte
	eventually(t, time.Minute, "the CSR to be approved and signed", func(ctx context.Context) (bool, error) {
		got, err := s.client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Spec.Username != "system:bootstrap:"+id {
			return false, fmt.Errorf("CSR made by %q", got.Spec.Username)
		}
		issued = got.Status.Certificate
		return len(issued) > 0, nil
	})
	t.Logf("approved and signed after %s", time.Since(begin).Round(time.Millisecond))

	block, _ := pem.Decode(issued)
	if block == nil {
		t.Fatalf("issued certificate is not PEM: %q", issued)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(readFile(t, filepath.Join(dir, "tls", "client-ca.crt")))) {
		t.Fatal("no client CA")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("issued certificate does not chain to the client CA: %v", err)
	}
	if cert.Subject.CommonName != "system:node:edge-2" {
		t.Fatalf("issued certificate for %q", cert.Subject.CommonName)
	}
}

func testDisabled(t *testing.T) {
	s := startServer(t, t.TempDir(), "--disable=controller-manager", "--disable", "scheduler")
	ctx := context.Background()
	var status int
	if err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status).Error(); err != nil || status != http.StatusOK {
		t.Fatalf("/readyz = %d, %v", status, err)
	}
	// Only the controller-manager's root-ca-cert-publisher makes this one.
	// (The node bootstrap bindings it also makes are made at start for node
	// tokens now, so they no longer tell.)
	if _, err := s.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("controller-manager ran: kube-system/kube-root-ca.crt lookup = %v", err)
	}
	createNamespace(t, s, "idle")
	mustKubectl(t, s, "-n", "idle", "create", "deployment", "web", "--image=nginx")
	consistently(t, 3*time.Second, "no ReplicaSet without the controller-manager", func(ctx context.Context) (bool, error) {
		rss, err := s.client.AppsV1().ReplicaSets("idle").List(ctx, metav1.ListOptions{})
		return err == nil && len(rss.Items) == 0, err
	})
	if err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status).Error(); err != nil || status != http.StatusOK {
		t.Fatalf("/readyz = %d, %v", status, err)
	}
	s.stop()
}

// consistently polls cond every 100ms for d and fails the first time it is false.
func consistently(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var failed error
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) {
		// Each check gets its own deadline: the window's would cut the last one short.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if ok, err := cond(ctx); !ok {
			failed = fmt.Errorf("condition false (error: %v)", err)
			return true, nil
		}
		return false, nil
	})
	if failed != nil {
		t.Fatalf("%s: %v", what, failed)
	}
}

// anonymousConfig is s's client configuration without its credentials.
func anonymousConfig(s *server) *rest.Config {
	return rest.AnonymousClientConfig(s.config)
}
