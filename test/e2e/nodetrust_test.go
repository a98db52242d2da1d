package e2e

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"github.com/edgeplane/edgeplane/pkg/join"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// TestNodeTrustE2E runs one control-plane server and checks, with real
// requests, what a node token and a node may do (a SubjectAccessReview
// matrix, and the requests that admission refuses), that a node token gets
// a client certificate for a new node name only, that a node's serving
// certificate may not name the API server, and the `node forget`, `token
// rotate --node` and `token list` commands.
func TestNodeTrustE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	parallel(t, 60*time.Second)
	dir := t.TempDir()
	// An advertise address in front of the loopback-bound server (a load
	// balancer's, as far as the server knows): a loopback-only server
	// publishes no endpoint for the kubernetes Service, and the SAN policy
	// is tested against the one it publishes.
	s := startServer(t, dir, "--advertise-address", "10.99.2.250")
	ctx := context.Background()
	tok, ok, err := nodetoken.ReadFile(dir)
	if err != nil || !ok {
		t.Fatalf("no default node token: %v, %v", ok, err)
	}
	asToken := tokenClient(t, s, tok.BootstrapToken())
	asNode := func(name string) kubernetes.Interface {
		cfg := rest.CopyConfig(s.config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
		return kubernetes.NewForConfigOrDie(cfg)
	}

	t.Run("SubjectAccessReview matrix", func(t *testing.T) {
		token := authorizationv1.SubjectAccessReviewSpec{User: "system:bootstrap:" + tok.ID,
			Groups: []string{"system:bootstrappers", nodetoken.NodeGroup, "system:authenticated"}}
		node := authorizationv1.SubjectAccessReviewSpec{User: "system:node:edge-1", Groups: []string{"system:nodes", "system:authenticated"}}
		anonymous := authorizationv1.SubjectAccessReviewSpec{User: "system:anonymous", Groups: []string{"system:unauthenticated"}}
		record, err := nodeidentity.SecretName("edge-1")
		if err != nil {
			t.Fatal(err)
		}
		res := func(verb, ns, resource, name string) authorizationv1.ResourceAttributes {
			group, sub := "", ""
			resource, sub, _ = strings.Cut(resource, "/")
			if g, r, ok := strings.Cut(resource, "."); ok {
				resource, group = g, r
			}
			return authorizationv1.ResourceAttributes{Verb: verb, Namespace: ns, Group: group, Resource: resource, Subresource: sub, Name: name}
		}
		type entry struct {
			who   string
			spec  authorizationv1.SubjectAccessReviewSpec
			attrs authorizationv1.ResourceAttributes
			allow bool
		}
		var matrix []entry
		both := func(allow bool, attrs ...authorizationv1.ResourceAttributes) {
			for _, a := range attrs {
				matrix = append(matrix, entry{"node token", token, a, allow}, entry{"node", node, a, allow})
			}
		}
		only := func(who string, spec authorizationv1.SubjectAccessReviewSpec, allow bool, attrs ...authorizationv1.ResourceAttributes) {
			for _, a := range attrs {
				matrix = append(matrix, entry{who, spec, a, allow})
			}
		}
		// Denied to both: Secrets and ConfigMaps in any namespace, the
		// server join Secret, node identity records, bootstrap tokens,
		// approving any CSR, RBAC.
		both(false,
			res("list", "", "secrets", ""), res("watch", "", "secrets", ""),
			res("list", "kube-system", "secrets", ""), res("list", "default", "secrets", ""), res("list", "kube-public", "secrets", ""),
			res("get", "kube-system", "secrets", join.SecretName), res("get", "kube-system", "secrets", record),
			res("get", "kube-system", "secrets", bootstraputil.BootstrapTokenSecretName(tok.ID)), res("get", "default", "secrets", "app"),
			res("create", "kube-system", "secrets", ""),
			res("list", "", "configmaps", ""), res("list", "kube-system", "configmaps", ""), res("list", "default", "configmaps", ""),
			res("list", "kube-public", "configmaps", ""), res("get", "default", "configmaps", "app"),
			res("get", "kube-system", "configmaps", "extension-apiserver-authentication"),
			res("update", "", "certificatesigningrequests.certificates.k8s.io/approval", "node-csr-x"),
			res("approve", "", "signers.certificates.k8s.io", certificatesv1.KubeAPIServerClientKubeletSignerName),
			res("approve", "", "signers.certificates.k8s.io", certificatesv1.KubeAPIServerClientSignerName),
			res("approve", "", "signers.certificates.k8s.io", certificatesv1.KubeletServingSignerName),
			res("approve", "", "signers.certificates.k8s.io", "*"),
			res("create", "", "clusterrolebindings.rbac.authorization.k8s.io", ""),
			res("list", "", "pods/exec", ""),
		)
		// Upstream's csrapproving controller approves a client request
		// when its requester may create this subresource: a node token's
		// requests are edgeplane's approver's to decide, and a node's own
		// (certificate rotation) upstream's.
		both(false, res("create", "", "certificatesigningrequests.certificates.k8s.io/nodeclient", ""))
		only("node token", token, false, res("create", "", "certificatesigningrequests.certificates.k8s.io/selfnodeclient", ""))
		only("node", node, true, res("create", "", "certificatesigningrequests.certificates.k8s.io/selfnodeclient", ""))
		// Denied to the token: what only nodes do, and only for
		// themselves (NodeRestriction admission: below).
		only("node token", token, false,
			res("create", "default", "pods", ""), res("create", "", "nodes", ""), res("patch", "", "nodes", "edge-2"),
			res("update", "", "nodes/status", "edge-2"), res("list", "", "pods", ""))
		// What a join needs: create a CSR (any signer: the signer's
		// approval is what a kube-apiserver-client CSR with
		// O=system:masters would need, and that is denied above), get
		// its own CSR, read kubeadm's ConfigMaps and edgeplane-node-config,
		// and (kubeadm) get Nodes; cluster-info is read anonymously.
		both(true,
			res("create", "", "certificatesigningrequests.certificates.k8s.io", ""),
			res("get", "", "certificatesigningrequests.certificates.k8s.io", "node-csr-x"),
			res("get", "kube-system", "configmaps", "kubeadm-config"),
			res("get", "kube-system", "configmaps", "kubelet-config"),
			res("get", nodeconfig.Namespace, "configmaps", nodeconfig.Name),
		)
		only("node token", token, true, res("get", "", "nodes", "edge-1"))
		only("anonymous", anonymous, true, res("get", "kube-public", "configmaps", "cluster-info"))
		only("anonymous", anonymous, false, res("list", "kube-public", "configmaps", ""),
			res("create", "", "certificatesigningrequests.certificates.k8s.io", ""), res("get", "kube-system", "configmaps", "kubeadm-config"))

		for _, e := range matrix {
			spec := e.spec
			attrs := e.attrs
			spec.ResourceAttributes = &attrs
			sar, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			what := attrs.Verb + " " + strings.Trim(strings.Join([]string{attrs.Group, attrs.Resource, attrs.Subresource}, "/"), "/")
			if attrs.Namespace != "" || attrs.Name != "" {
				what += " " + attrs.Namespace + "/" + attrs.Name
			}
			if sar.Status.Allowed != e.allow {
				t.Errorf("%s may %s: %v (%s), want %v", e.who, what, sar.Status.Allowed, sar.Status.Reason, e.allow)
			}
		}
		t.Logf("%d SubjectAccessReviews checked", len(matrix))
	})

	t.Run("what admission refuses a node", func(t *testing.T) {
		// A node is authorized to create Pods and Nodes and patch Nodes
		// (its own mirror pods and Node); NodeRestriction admission
		// refuses anything else.
		if _, err := s.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-2"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		edge1 := asNode("edge-1")
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-mirror", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		_, err := edge1.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		wantForbidden(t, "node edge-1 creating a pod that is not a mirror pod", err)
		_, err = edge1.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-3"}}, metav1.CreateOptions{})
		wantForbidden(t, "node edge-1 creating Node edge-3", err)
		_, err = edge1.CoreV1().Nodes().Patch(ctx, "edge-2", types.MergePatchType, []byte(`{"metadata":{"labels":{"taken":"yes"}}}`), metav1.PatchOptions{})
		wantForbidden(t, "node edge-1 patching Node edge-2", err)
		_, err = edge1.CoreV1().Secrets("kube-system").Get(ctx, join.SecretName, metav1.GetOptions{})
		wantForbidden(t, "node edge-1 reading the server join Secret", err)
		_, err = asToken.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		wantForbidden(t, "the node token creating a pod", err)
	})

	keyA, keyB := newECKey(t), newECKey(t)
	t.Run("a node token gets a certificate for a new node name only", func(t *testing.T) {
		csr := clientCSR(t, asToken, "joined-a", "edge-joined", keyA)
		if len(csr.Status.Certificate) == 0 {
			t.Fatalf("the first request for edge-joined got no certificate: %+v", csr.Status.Conditions)
		}
		// The certificate authenticates the node.
		who := selfSubject(t, s, csr.Status.Certificate, keyA)
		if who.Username != "system:node:edge-joined" {
			t.Fatalf("the certificate authenticates %+v, want system:node:edge-joined", who)
		}
		denied := clientCSR(t, asToken, "joined-b", "edge-joined", keyB)
		if len(denied.Status.Certificate) > 0 || denied.Status.Conditions[0].Type != certificatesv1.CertificateDenied ||
			!strings.Contains(denied.Status.Conditions[0].Message, "edgeplane node forget edge-joined") {
			t.Fatalf("another key's request for edge-joined: %+v (certificate issued: %v)", denied.Status.Conditions, len(denied.Status.Certificate) > 0)
		}
		// A Node without a record (Ready; NotReady is the same to the
		// approver: pkg/csrapprover's tests) is no token's to take.
		createNodeWithAddresses(t, s.client, "edge-old", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.2.1"})
		old := clientCSR(t, asToken, "old-takeover", "edge-old", keyB)
		if len(old.Status.Certificate) > 0 || old.Status.Conditions[0].Reason != "NodeExistsWithoutIdentity" {
			t.Fatalf("a request for an existing Node without a record: %+v", old.Status.Conditions)
		}
	})

	t.Run("a node's serving certificate may not name the API server", func(t *testing.T) {
		endpoint := kubernetesEndpoint(t, s)
		createNodeWithAddresses(t, s.client, "edge-evil",
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.2.2"},
			corev1.NodeAddress{Type: corev1.NodeHostName, Address: "kubernetes.default.svc.cluster.local"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "10.43.0.1"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: endpoint},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "127.0.0.1"})
		for _, tc := range []struct {
			name string
			san  string
		}{
			{"evil-service-name", "kubernetes.default.svc.cluster.local"},
			{"evil-service-ip", "10.43.0.1"},
			{"evil-endpoint", endpoint},
			{"evil-loopback", "127.0.0.1"},
		} {
			var ips []net.IP
			var dns []string
			if ip := net.ParseIP(tc.san); ip != nil {
				ips = []net.IP{ip}
			} else {
				dns = []string{tc.san}
			}
			key := newECKey(t)
			der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
				Subject: pkix.Name{CommonName: "system:node:edge-evil", Organization: []string{"system:nodes"}}, DNSNames: dns, IPAddresses: ips}, key)
			if err != nil {
				t.Fatal(err)
			}
			_, err = asNode("edge-evil").CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name},
				Spec: certificatesv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
					SignerName: certificatesv1.KubeletServingSignerName, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cond := waitCondition(t, s, tc.name)
			if cond.Type != certificatesv1.CertificateDenied || cond.Reason != "SANNamesAPIServer" || !strings.Contains(cond.Message, tc.san) {
				t.Errorf("%s (SAN %s): %s %s: %s; want Denied SANNamesAPIServer naming the SAN", tc.name, tc.san, cond.Type, cond.Reason, cond.Message)
			}
		}
	})

	t.Run("node forget", func(t *testing.T) {
		createNodeWithAddresses(t, s.client, "edge-joined", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.2.3"})
		out := cli(t, 0, "node", "forget", "--data-dir", dir, "edge-joined")
		for _, want := range []string{"node edge-joined: identity record deleted (key sha256:", "bound by token " + tok.ID, "node edge-joined: Node deleted"} {
			wantText(t, out, want)
		}
		if _, err := s.client.CoreV1().Nodes().Get(ctx, "edge-joined", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Node edge-joined after node forget: %v, want NotFound", err)
		}
		csr := clientCSR(t, asToken, "joined-b-again", "edge-joined", keyB)
		if len(csr.Status.Certificate) == 0 {
			t.Fatalf("after node forget, another key's request for edge-joined: %+v", csr.Status.Conditions)
		}
		wantText(t, cli(t, 1, "node", "forget", "--data-dir", dir, "edge-never"), "nothing to forget")
		wantText(t, cli(t, 1, "node", "forget", "--data-dir", dir, "Not_A_Name"), "is not a node name")
	})

	t.Run("token list shows expiry", func(t *testing.T) {
		created, err := nodetoken.Parse(lastLine(cli(t, 0, "token", "create", "--data-dir", dir, "--ttl", "2h", "--description", "expiring")))
		if err != nil {
			t.Fatal(err)
		}
		list := cli(t, 0, "token", "list", "--data-dir", dir)
		if !containsLine(list, tok.ID, "<forever>", "<never>") {
			t.Errorf("token list does not show that the default token never expires:\n%s", list)
		}
		var expires time.Time
		for _, l := range strings.Split(list, "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == created.ID {
				expires, err = time.Parse(time.RFC3339, f[2])
				if err != nil || f[1] != "1h" {
					t.Errorf("token list shows %s with TTL %q and EXPIRES %q (%v), want 1h and a time", created.ID, f[1], f[2], err)
				}
			}
		}
		if want := time.Now().Add(2 * time.Hour); expires.Before(want.Add(-time.Minute)) || expires.After(want.Add(time.Second)) {
			t.Errorf("token list shows %s expiring at %s, want about %s:\n%s", created.ID, expires, want.UTC().Format(time.RFC3339), list)
		}
	})

	t.Run("token rotate --node", func(t *testing.T) {
		// A node joins with the old token.
		joined := clientCSR(t, asToken, "rotate-joined", "edge-rotated", keyA)
		wantText(t, cli(t, 1, "token", "rotate", "--data-dir", dir), "pass --node")
		out := cli(t, 0, "token", "rotate", "--node", "--data-dir", dir)
		next, err := nodetoken.Parse(lastLine(out))
		if err != nil {
			t.Fatalf("token rotate --node printed %q: %v", out, err)
		}
		wantText(t, out, "default node token "+tok.ID+" revoked")
		inFile, ok, err := nodetoken.ReadFile(dir)
		if err != nil || !ok || inFile != next || next.ID == tok.ID || next.CAHash != tok.CAHash {
			t.Fatalf("after rotate, %s holds %+v (%v, %v); printed %+v, old %s", nodetoken.FileName, inFile, ok, err, next, tok.ID)
		}
		if fi, err := os.Stat(filepath.Join(dir, nodetoken.FileName)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("node-token after rotate: %v, %v; want mode 0600", fi, err)
		}
		if _, err := nodetoken.Discover(ctx, s.config.Host, tok); !errors.Is(err, nodetoken.ErrTokenUnknown) {
			t.Errorf("discovery with the rotated-out token: %v, want ErrTokenUnknown", err)
		}
		eventually(t, 30*time.Second, "the old token to be refused", func(ctx context.Context) (bool, error) {
			_, err := asToken.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			return apierrors.IsUnauthorized(err), nil
		})
		if _, err := nodetoken.Discover(ctx, s.config.Host, next); err != nil {
			t.Fatalf("discovery with the new token: %v", err)
		}
		// The joined node is unaffected: its certificate still
		// authenticates it.
		if who := selfSubject(t, s, joined.Status.Certificate, keyA); who.Username != "system:node:edge-rotated" {
			t.Fatalf("after rotate the joined node authenticates as %+v", who)
		}
		list := cli(t, 0, "token", "list", "--data-dir", dir)
		if strings.Contains(list, tok.ID) || !strings.Contains(list, next.ID) {
			t.Fatalf("token list after rotate:\n%s", list)
		}
	})

	t.Run("kube-apiserver-client requests: no system:masters, no approval", func(t *testing.T) {
		next, _, err := nodetoken.ReadFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		nc := tokenClient(t, s, next.BootstrapToken())
		create := func(name, cn, org string) error {
			der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{org}}}, newECKey(t))
			if err != nil {
				t.Fatal(err)
			}
			_, err = nc.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: certificatesv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
					SignerName: certificatesv1.KubeAPIServerClientSignerName, Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}},
			}, metav1.CreateOptions{})
			return err
		}
		// The API server's CertificateSubjectRestriction admission
		// refuses system:masters for this signer outright.
		if err := create("masters", "mallory", "system:masters"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:masters") {
			t.Fatalf("a node token's kube-apiserver-client request with O=system:masters: %v, want Forbidden", err)
		}
		// Any other subject may be asked for; only the signer's
		// approval (denied to tokens and nodes: the matrix above) would
		// get it signed, and nothing approves it.
		if err := create("as-a-node", "system:node:edge-x", "system:nodes"); err != nil {
			t.Fatalf("the node token may create any CSR (the signer's approval is what it lacks): %v", err)
		}
		later := clientCSR(t, nc, "after-as-a-node", "edge-after", newECKey(t))
		if len(later.Status.Certificate) == 0 {
			t.Fatalf("a node token request made after it: %+v", later.Status.Conditions)
		}
		csr, err := s.client.CertificatesV1().CertificateSigningRequests().Get(ctx, "as-a-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(csr.Status.Conditions) > 0 || len(csr.Status.Certificate) > 0 {
			t.Fatalf("a node token's kube-apiserver-client request was decided: %+v", csr.Status)
		}
	})
}
