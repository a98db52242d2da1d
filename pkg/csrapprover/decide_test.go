package csrapprover

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// request is what a test CSR holds; the zero value plus a node name is
// what a kubelet sends.
type request struct {
	cn     string
	orgs   []string
	dns    []string
	ips    []string
	emails []string
	uris   []string
}

// x509Request makes a real PEM x509 certificate request.
func x509Request(t testing.TB, r request) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: r.cn, Organization: r.orgs},
		DNSNames:       r.dns,
		EmailAddresses: r.emails,
	}
	for _, ip := range r.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range r.uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

var kubeletUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}

// servingCSR is a kubelet serving CSR object from requester (in groups).
func servingCSR(name, requester string, groups []string, usages []certificatesv1.KeyUsage, pemReq []byte) *certificatesv1.CertificateSigningRequest {
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pemReq,
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     usages,
			Username:   requester,
			Groups:     groups,
		},
	}
}

func testNode(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func addr(typ corev1.NodeAddressType, a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: typ, Address: a}
}

func TestDecide(t *testing.T) {
	nodeA := testNode("edge-a",
		addr(corev1.NodeHostName, "edge-a"),
		addr(corev1.NodeInternalIP, "192.0.2.10"),
		addr(corev1.NodeInternalIP, "2001:db8::10"),
		addr(corev1.NodeExternalIP, "198.51.100.7"),
		addr(corev1.NodeInternalDNS, "edge-a.lan"),
		addr(corev1.NodeExternalDNS, "edge-a.example.com"),
	)
	nodes := []string{"system:nodes", "system:authenticated"}
	own := request{cn: "system:node:edge-a", orgs: []string{"system:nodes"}, dns: []string{"edge-a"}, ips: []string{"192.0.2.10"}}
	with := func(f func(*request)) request { r := own; f(&r); return r }

	tests := []struct {
		name      string
		requester string
		groups    []string
		usages    []certificatesv1.KeyUsage
		req       request
		pem       []byte // instead of req
		signer    string
		node      *corev1.Node
		want      Verdict
		reason    string
		said      []string
	}{
		{name: "own hostname and IP", req: own, node: nodeA, want: Approve, reason: ReasonApproved, said: []string{"edge-a, 192.0.2.10"}},
		{name: "with key encipherment", usages: []certificatesv1.KeyUsage{certificatesv1.UsageKeyEncipherment, certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			req: own, node: nodeA, want: Approve, reason: ReasonApproved},
		{name: "every kind of own address", node: nodeA, want: Approve, reason: ReasonApproved,
			req: with(func(r *request) {
				r.dns = []string{"edge-a", "EDGE-A.lan", "edge-a.example.com"}
				r.ips = []string{"192.0.2.10", "2001:db8:0::10", "198.51.100.7"}
			})},
		{name: "IP only", req: with(func(r *request) { r.dns = nil }), node: nodeA, want: Approve, reason: ReasonApproved},
		{name: "foreign IP", req: with(func(r *request) { r.ips = []string{"192.0.2.10", "192.0.2.99"} }), node: nodeA,
			want: Deny, reason: ReasonSANNotOfNode, said: []string{"IP SAN 192.0.2.99 is not an address of node edge-a", "edge-a.example.com"}},
		{name: "foreign DNS name", req: with(func(r *request) { r.dns = []string{"edge-a", "kubernetes.default.svc"} }), node: nodeA,
			want: Deny, reason: ReasonSANNotOfNode, said: []string{`DNS SAN "kubernetes.default.svc" is not an address of node edge-a`}},
		{name: "foreign DNS name and IP, both said", req: with(func(r *request) { r.dns = []string{"evil.example"}; r.ips = []string{"203.0.113.1"} }), node: nodeA,
			want: Deny, reason: ReasonSANNotOfNode, said: []string{`"evil.example"`, "203.0.113.1"}},
		{name: "IP of another address type is not a DNS name", req: with(func(r *request) { r.dns = []string{"192.0.2.10.nip.io"} }), node: nodeA,
			want: Deny, reason: ReasonSANNotOfNode, said: []string{"192.0.2.10.nip.io"}},
		{name: "requester not a node", requester: "admin", groups: []string{"system:masters"}, req: own, node: nil,
			want: Deny, reason: ReasonNotANode, said: []string{`requester "admin" is not a node`}},
		{name: "requester a node user without system:nodes", groups: []string{"system:authenticated"}, req: own, node: nodeA,
			want: Deny, reason: ReasonNotANode, said: []string{"not in group system:nodes"}},
		{name: "another node asks for this node's name", requester: "system:node:edge-b", req: own, node: testNode("edge-b", addr(corev1.NodeInternalIP, "192.0.2.11")),
			want: Deny, reason: ReasonSubject, said: []string{`subject CN "system:node:edge-a" is not the requester's "system:node:edge-b"`, "IP SAN 192.0.2.10 is not an address of node edge-b", `DNS SAN "edge-a"`}},
		{name: "subject without the nodes organization", req: with(func(r *request) { r.orgs = nil }), node: nodeA,
			want: Deny, reason: ReasonSubject, said: []string{"subject O [] is not exactly [system:nodes]"}},
		{name: "subject with an extra organization", req: with(func(r *request) { r.orgs = []string{"system:nodes", "system:masters"} }), node: nodeA,
			want: Deny, reason: ReasonSubject, said: []string{"system:masters"}},
		{name: "client auth usage", usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth},
			req: own, node: nodeA, want: Deny, reason: ReasonUsages, said: []string{`usages ["client auth"] are not`}},
		{name: "server auth missing", usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment},
			req: own, node: nodeA, want: Deny, reason: ReasonUsages, said: []string{`usages ["server auth"] are missing`}},
		{name: "email SAN", req: with(func(r *request) { r.emails = []string{"root@edge-a"} }), node: nodeA,
			want: Deny, reason: ReasonSANs, said: []string{`email SAN "root@edge-a"`}},
		{name: "URI SAN", req: with(func(r *request) { r.uris = []string{"spiffe://cluster/ns/x"} }), node: nodeA,
			want: Deny, reason: ReasonSANs, said: []string{`URI SAN "spiffe://cluster/ns/x"`}},
		{name: "no SAN", req: with(func(r *request) { r.dns, r.ips = nil, nil }), node: nodeA,
			want: Deny, reason: ReasonSANs, said: []string{"no DNS or IP SAN"}},
		{name: "not PEM", pem: []byte("hello"), node: nodeA,
			want: Deny, reason: ReasonBadRequest, said: []string{"not a PEM"}},
		{name: "other signer", signer: certificatesv1.KubeAPIServerClientSignerName, req: own, node: nodeA,
			want: Deny, reason: ReasonBadRequest, said: []string{"kubernetes.io/kube-apiserver-client"}},
		{name: "node does not exist yet", req: own, node: nil,
			want: WaitForNode, reason: ReasonNodeNotFound, said: []string{`node "edge-a" does not exist`}},
		{name: "node without addresses yet", req: own, node: testNode("edge-a", addr(corev1.NodeInternalIP, "")),
			want: WaitForNode, reason: ReasonNodeHasNoAddress},
		{name: "malformed request is denied without waiting for the node", req: with(func(r *request) { r.emails = []string{"a@b"} }), node: nil,
			want: Deny, reason: ReasonSANs},
		{name: "several problems, all said", requester: "system:node:edge-a", groups: []string{"system:authenticated"},
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth},
			req:    with(func(r *request) { r.orgs = nil; r.ips = []string{"203.0.113.9"} }), node: nodeA,
			want: Deny, reason: ReasonNotANode, said: []string{"system:nodes (its groups", "subject O", `["digital signature"] are missing`, "IP SAN 203.0.113.9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requester, groups, usages, signer := "system:node:edge-a", nodes, kubeletUsages, certificatesv1.KubeletServingSignerName
			if tc.requester != "" {
				requester = tc.requester
			}
			if tc.groups != nil {
				groups = tc.groups
			}
			if tc.usages != nil {
				usages = tc.usages
			}
			if tc.signer != "" {
				signer = tc.signer
			}
			pemReq := tc.pem
			if pemReq == nil {
				pemReq = x509Request(t, tc.req)
			}
			csr := servingCSR("csr-1", requester, groups, usages, pemReq)
			csr.Spec.SignerName = signer

			d := Decide(csr, tc.node)
			t.Logf("%s %s: %s", d.Verdict, d.Reason, d.Message)
			if d.Verdict != tc.want || d.Reason != tc.reason {
				t.Fatalf("got %s (%s), want %s (%s): %s", d.Verdict, d.Reason, tc.want, tc.reason, d.Message)
			}
			for _, s := range tc.said {
				if !strings.Contains(d.Message, s) {
					t.Errorf("message %q does not say %q", d.Message, s)
				}
			}
			if d.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestNodeOf(t *testing.T) {
	tests := []struct {
		requester, cn, want string
	}{
		{"system:node:edge-a", "system:node:edge-a", "edge-a"},
		{"system:node:edge-b", "system:node:edge-a", "edge-b"},
		{"admin", "system:node:edge-a", "edge-a"},
		{"admin", "admin", ""},
	}
	for _, tc := range tests {
		csr := servingCSR("x", tc.requester, nil, kubeletUsages, x509Request(t, request{cn: tc.cn, dns: []string{"x"}}))
		if got := NodeOf(csr); got != tc.want {
			t.Errorf("NodeOf(requester %s, CN %s) = %q, want %q", tc.requester, tc.cn, got, tc.want)
		}
	}
}
