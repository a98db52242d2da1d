package csrapprover

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

var (
	tokenGroups  = []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token", "system:authenticated"}
	clientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
)

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func fingerprint(t testing.TB, key *ecdsa.PrivateKey) string {
	t.Helper()
	fp, err := nodeidentity.Fingerprint(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// clientCSR is a node client certificate request object.
func clientCSR(requester string, groups []string, usages []certificatesv1.KeyUsage, pemReq []byte) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "node-csr-1", CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pemReq,
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     usages,
			Username:   requester,
			Groups:     groups,
		},
	}
}

// x509With is an x509 request signed with key, with tmpl's fields.
func x509With(t testing.TB, key any, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestDecideClient(t *testing.T) {
	key, other := newKey(t), newKey(t)
	fp := fingerprint(t, key)
	nodeReq := func(k *ecdsa.PrivateKey, node string) []byte {
		b, err := nodeidentity.ClientRequest(k, node)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bound := nodeidentity.Record{Node: "edge-a", Fingerprint: fp, BoundBy: "token abcdef", BoundAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	created := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC) // before the request
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		requester string
		groups    []string
		usages    []certificatesv1.KeyUsage
		signer    string
		label     bool
		req       []byte
		state     NodeState
		kind      ClientKind
		want      ClientVerdict
		reason    string
		boundBy   string
		said      []string
	}{
		// Node token requests.
		{name: "new name: bind and approve", req: nodeReq(key, "edge-a"), kind: TokenRequest,
			want: BindThenApprove, reason: ReasonIdentityBound, boundBy: "token abcdef", said: []string{"edge-a", fp, "node token abcdef"}},
		{name: "bound name, same key: approve", req: nodeReq(key, "edge-a"), state: NodeState{Record: bound, HasRecord: true, NodeCreated: created}, kind: TokenRequest,
			want: ApproveClient, reason: ReasonIdentityMatches},
		{name: "bound name, same key, Node deleted: approve", req: nodeReq(key, "edge-a"), state: NodeState{Record: bound, HasRecord: true}, kind: TokenRequest,
			want: ApproveClient, reason: ReasonIdentityMatches},
		{name: "bound name, another key: deny, saying what to do", req: nodeReq(other, "edge-a"), state: NodeState{Record: bound, HasRecord: true, NodeCreated: created}, kind: TokenRequest,
			want: DenyClient, reason: ReasonIdentityMismatch,
			said: []string{"node edge-a's identity was bound at its first join (token abcdef, 2026-01-01T00:00:00Z)", "is not that key", fp, "edgeplane node forget edge-a"}},
		{name: "bound name, another key, Node gone: still denied", req: nodeReq(other, "edge-a"), state: NodeState{Record: bound, HasRecord: true}, kind: TokenRequest,
			want: DenyClient, reason: ReasonIdentityMismatch},
		{name: "the server's node: deny", req: nodeReq(other, "edge-a"),
			state: NodeState{Record: nodeidentity.Record{Node: "edge-a", Fingerprint: fp, BoundBy: "server"}, HasRecord: true, NodeCreated: created}, kind: TokenRequest,
			want: DenyClient, reason: ReasonIdentityMismatch, said: []string{"(server)"}},
		{name: "a Node without a record: deny", req: nodeReq(key, "edge-a"), state: NodeState{NodeCreated: created}, kind: TokenRequest,
			want: DenyClient, reason: ReasonNodeWithoutRecord,
			said: []string{"node edge-a exists and has no recorded identity", "server's own node", "records its identity itself at its next start", "edgeplane node forget edge-a"}},
		{name: "a stock kubelet's request (RSA key, key encipherment)", usages: []certificatesv1.KeyUsage{certificatesv1.UsageKeyEncipherment, certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
			req: x509With(t, rsaKey, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-k", Organization: []string{"system:nodes"}}}), kind: TokenRequest,
			want: BindThenApprove, reason: ReasonIdentityBound, boundBy: "token abcdef"},
		{name: "subject not a node", req: x509With(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:nodes"}}}), kind: TokenRequest,
			want: DenyClient, reason: ReasonClientSubject, said: []string{`subject CN "admin" is not system:node:<node name>`}},
		{name: "subject's node name invalid", req: x509With(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:Edge_A", Organization: []string{"system:nodes"}}}), kind: TokenRequest,
			want: DenyClient, reason: ReasonClientSubject, said: []string{`"Edge_A" is not a node name`}},
		{name: "O system:masters", req: x509With(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:masters"}}}), kind: TokenRequest,
			want: DenyClient, reason: ReasonClientSubject, said: []string{`subject O ["system:masters"] is not exactly [system:nodes]`}},
		{name: "extra O", req: x509With(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:nodes", "system:masters"}}}), kind: TokenRequest,
			want: DenyClient, reason: ReasonClientSubject},
		{name: "SANs", req: x509With(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:nodes"}},
			DNSNames: []string{"kubernetes.default.svc"}, IPAddresses: []net.IP{net.ParseIP("10.43.0.1")}}), kind: TokenRequest,
			want: DenyClient, reason: ReasonClientSANs, said: []string{"kubernetes.default.svc", "10.43.0.1"}},
		{name: "server auth usage", usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth, certificatesv1.UsageServerAuth},
			req: nodeReq(key, "edge-a"), kind: TokenRequest, want: DenyClient, reason: ReasonClientUsages, said: []string{"server auth"}},
		{name: "client auth missing", usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature},
			req: nodeReq(key, "edge-a"), kind: TokenRequest, want: DenyClient, reason: ReasonClientUsages},
		{name: "bootstrap user outside system:bootstrappers", groups: []string{"system:authenticated"},
			req: nodeReq(key, "edge-a"), kind: TokenRequest, want: DenyClient, reason: ReasonNotABootstrapper, said: []string{"is not a node token"}},
		{name: "a bootstrapper that is not a token user", requester: "mallory", req: nodeReq(key, "edge-a"), kind: TokenRequest,
			want: DenyClient, reason: ReasonNotABootstrapper, said: []string{`requester "mallory"`}},
		{name: "not PEM", req: []byte("hello"), kind: TokenRequest, want: DenyClient, reason: ReasonClientBadRequest, said: []string{"not a PEM"}},
		{name: "a mismatch is denied even when malformed too: every problem said", usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
			req: x509With(t, other, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a"}}), state: NodeState{Record: bound, HasRecord: true}, kind: TokenRequest,
			want: DenyClient, reason: ReasonClientSubject, said: []string{"subject O", "usages"}},

		// Enrollment: a node as itself.
		{name: "enrollment, no record: bind only", requester: "system:node:edge-a", groups: []string{"system:nodes", "system:authenticated"}, label: true,
			req: nodeReq(key, "edge-a"), state: NodeState{NodeCreated: created}, kind: EnrollRequest, want: BindOnly, reason: ReasonIdentityBound, boundBy: "enrollment"},
		{name: "enrollment with a record: nothing", requester: "system:node:edge-a", groups: []string{"system:nodes"}, label: true,
			req: nodeReq(other, "edge-a"), state: NodeState{Record: bound, HasRecord: true, NodeCreated: created}, kind: EnrollRequest, want: Leave},
		{name: "enrollment for another node's name: nothing", requester: "system:node:edge-b", groups: []string{"system:nodes"}, label: true,
			req: nodeReq(key, "edge-a"), state: NodeState{NodeCreated: created}, kind: EnrollRequest, want: Leave, said: []string{"is not the node edge-a"}},
		{name: "enrollment without system:nodes: nothing", requester: "system:node:edge-a", groups: []string{"system:authenticated"}, label: true,
			req: nodeReq(key, "edge-a"), state: NodeState{NodeCreated: created}, kind: EnrollRequest, want: Leave},
		{name: "enrollment of a malformed request: nothing", requester: "system:node:edge-a", groups: []string{"system:nodes"}, label: true,
			req:   x509With(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:edge-a", Organization: []string{"system:masters"}}}),
			state: NodeState{NodeCreated: created}, kind: EnrollRequest, want: Leave},
		{name: "enrollment without a Node (forgotten): nothing", requester: "system:node:edge-a", groups: []string{"system:nodes"}, label: true,
			req: nodeReq(key, "edge-a"), kind: EnrollRequest, want: Leave, said: []string{"does not exist"}},
		{name: "enrollment older than its Node (made before a forget): nothing", requester: "system:node:edge-a", groups: []string{"system:nodes"}, label: true,
			req: nodeReq(key, "edge-a"), state: NodeState{NodeCreated: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)}, kind: EnrollRequest, want: Leave},

		// Not the approver's.
		{name: "a node rotating its certificate", requester: "system:node:edge-a", groups: []string{"system:nodes"},
			req: nodeReq(other, "edge-a"), state: NodeState{Record: bound, HasRecord: true, NodeCreated: created}, kind: NotOurs, want: Leave},
		{name: "an admin's request", requester: "admin", groups: []string{"system:masters"}, req: nodeReq(other, "edge-a"), kind: NotOurs, want: Leave},
		{name: "a token's request for another signer", signer: certificatesv1.KubeAPIServerClientSignerName, req: nodeReq(key, "edge-a"), kind: NotOurs, want: Leave},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requester, groups, usages := "system:bootstrap:abcdef", tokenGroups, clientUsages
			if tc.requester != "" {
				requester = tc.requester
			}
			if tc.groups != nil {
				groups = tc.groups
			}
			if tc.usages != nil {
				usages = tc.usages
			}
			csr := clientCSR(requester, groups, usages, tc.req)
			if tc.signer != "" {
				csr.Spec.SignerName = tc.signer
			}
			if tc.label {
				csr.Labels = map[string]string{nodeidentity.EnrollLabel: nodeidentity.EnrollValue}
			}
			if got := ClassifyClient(csr); got != tc.kind {
				t.Fatalf("ClassifyClient = %d, want %d", got, tc.kind)
			}
			d := DecideClient(csr, tc.state)
			t.Logf("%s %s: %s", d.Verdict, d.Reason, d.Message)
			if d.Verdict != tc.want || (tc.reason != "" && d.Reason != tc.reason) {
				t.Fatalf("got %s (%s), want %s (%s): %s", d.Verdict, d.Reason, tc.want, tc.reason, d.Message)
			}
			if d.BoundBy != tc.boundBy {
				t.Errorf("BoundBy %q, want %q", d.BoundBy, tc.boundBy)
			}
			for _, s := range tc.said {
				if !strings.Contains(d.Message, s) {
					t.Errorf("message %q does not say %q", d.Message, s)
				}
			}
			if d.Verdict == DenyClient && !strings.HasPrefix(d.Message, "edgeplane denied this node client certificate: ") {
				t.Errorf("a denial's message %q does not say who denied what", d.Message)
			}
		})
	}
}
