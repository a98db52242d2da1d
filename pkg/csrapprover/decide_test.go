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
		{name: "foreign DNS name", req: with(func(r *request) { r.dns = []string{"edge-a", "edge-z.example"} }), node: nodeA,
			want: Deny, reason: ReasonSANNotOfNode, said: []string{`DNS SAN "edge-z.example" is not an address of node edge-a`}},
		{name: "the API server's name, not reported", req: with(func(r *request) { r.dns = []string{"edge-a", "kubernetes.default.svc"} }), node: nodeA,
			want: Deny, reason: ReasonSANOfAPIServer, said: []string{`DNS SAN "kubernetes.default.svc" names the API server`}},
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

			var reserved Reserved
			reserved.APIServer = testAPIServer
			if tc.node != nil {
				reserved.Nodes = []*corev1.Node{tc.node}
			}
			d := Decide(csr, tc.node, reserved)
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

// testAPIServer is an API server with every kind of name.
var testAPIServer = APIServer{
	ClusterDomain:    "cluster.local",
	ServiceIPs:       []net.IP{net.ParseIP("10.43.0.1"), net.ParseIP("fd00:43::1")},
	AdvertiseAddress: net.ParseIP("192.0.2.1"),
	BindAddress:      net.ParseIP("192.0.2.2"),
	Hostname:         "ctl-1",
	TLSSANs:          []string{"api.example.com", "*.edge.example.com", "203.0.113.50"},
}

// TestDecideReservedSANs: a serving request for any name of the API
// server, of this host, or of another node is denied, naming the SAN and
// the rule, even when the requesting node reports that name as its own
// address (a kubelet writes its Node's addresses).
func TestDecideReservedSANs(t *testing.T) {
	nodeB := testNode("edge-b",
		addr(corev1.NodeHostName, "edge-b"),
		addr(corev1.NodeInternalIP, "192.0.2.20"),
		addr(corev1.NodeExternalDNS, "edge-b.example.net"))
	reservedFor := func(self *corev1.Node) Reserved {
		return Reserved{
			APIServer: testAPIServer,
			Endpoints: []net.IP{net.ParseIP("192.0.2.3"), net.ParseIP("2001:db8::3")},
			Nodes:     []*corev1.Node{self, nodeB},
		}
	}
	type sanCase struct {
		name   string
		node   string // the requester's node name; default edge-a
		dns    string
		ip     string
		reason string
		said   []string
	}
	api, other := ReasonSANOfAPIServer, ReasonSANOfOtherNode
	tests := []sanCase{
		{name: "service short name", dns: "kubernetes", reason: api, said: []string{`DNS SAN "kubernetes" names the API server`, ruleServiceName}},
		{name: "service name in namespace", dns: "kubernetes.default", reason: api, said: []string{ruleServiceName}},
		{name: "service name .svc", dns: "kubernetes.default.svc", reason: api, said: []string{ruleServiceName}},
		{name: "service full name", dns: "kubernetes.default.svc.cluster.local", reason: api, said: []string{ruleServiceName}},
		{name: "service full name, upper case, root dot", dns: "Kubernetes.Default.SVC.cluster.local.", reason: api, said: []string{ruleServiceName}},
		{name: "a node named kubernetes.default.svc", node: "kubernetes.default.svc", dns: "kubernetes.default.svc", reason: api, said: []string{ruleServiceName}},
		{name: "service IPv4", ip: "10.43.0.1", reason: api, said: []string{`IP SAN "10.43.0.1" names the API server`, ruleServiceIP}},
		{name: "service IPv6", ip: "fd00:43::1", reason: api, said: []string{ruleServiceIP}},
		{name: "service IP as a DNS SAN", dns: "10.43.0.1", reason: api, said: []string{ruleServiceIP}},
		{name: "localhost", dns: "localhost", reason: api, said: []string{`DNS SAN "localhost"`, ruleLocalhost}},
		{name: "a name under localhost", dns: "api.localhost", reason: api, said: []string{ruleLocalhost}},
		{name: "127.0.0.1", ip: "127.0.0.1", reason: api, said: []string{ruleLoopback}},
		{name: "elsewhere in 127/8", ip: "127.8.9.10", reason: api, said: []string{ruleLoopback}},
		{name: "::1", ip: "::1", reason: api, said: []string{ruleLoopback}},
		{name: "unspecified", ip: "0.0.0.0", reason: api, said: []string{ruleUnspecified}},
		{name: "advertise address", ip: "192.0.2.1", reason: api, said: []string{ruleAdvertise}},
		{name: "bind address", ip: "192.0.2.2", reason: api, said: []string{ruleBind}},
		{name: "server host name", dns: "ctl-1", reason: api, said: []string{ruleHostname}},
		{name: "tls-san name", dns: "api.example.com", reason: api, said: []string{ruleTLSSAN, "(api.example.com)"}},
		{name: "under a tls-san wildcard", dns: "edge-a.edge.example.com", reason: api, said: []string{ruleTLSSAN, "(*.edge.example.com)"}},
		{name: "tls-san IP", ip: "203.0.113.50", reason: api, said: []string{ruleTLSSAN, "(203.0.113.50)"}},
		{name: "another API server (EndpointSlice)", ip: "192.0.2.3", reason: api, said: []string{ruleEndpoint}},
		{name: "another API server, IPv6", ip: "2001:db8::3", reason: api, said: []string{ruleEndpoint}},
		{name: "another node's name", dns: "edge-b", reason: other, said: []string{`DNS SAN "edge-b" names node edge-b`, ruleOtherName}},
		{name: "another node's InternalIP", ip: "192.0.2.20", reason: other, said: []string{"names node edge-b", ruleOtherAddress + " (InternalIP)"}},
		{name: "another node's ExternalDNS", dns: "EDGE-B.example.net", reason: other, said: []string{ruleOtherAddress + " (ExternalDNS)"}},
		{name: "a wildcard", dns: "*.default.svc", reason: ReasonSANs, said: []string{`DNS SAN "*.default.svc" is a wildcard`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			self := tc.node
			if self == "" {
				self = "edge-a"
			}
			// The node reports the name as its own, as a kubelet can.
			node := testNode(self, addr(corev1.NodeInternalIP, "192.0.2.10"), addr(corev1.NodeHostName, self))
			r := request{cn: "system:node:" + self, orgs: []string{"system:nodes"}, ips: []string{"192.0.2.10"}}
			if tc.dns != "" {
				node.Status.Addresses = append(node.Status.Addresses, addr(corev1.NodeExternalDNS, tc.dns))
				r.dns = []string{tc.dns}
			}
			if tc.ip != "" {
				node.Status.Addresses = append(node.Status.Addresses, addr(corev1.NodeExternalIP, tc.ip))
				r.ips = append(r.ips, tc.ip)
			}
			csr := servingCSR("csr", "system:node:"+self, []string{"system:nodes"}, kubeletUsages, x509Request(t, r))
			d := Decide(csr, node, reservedFor(node))
			t.Logf("%s %s: %s", d.Verdict, d.Reason, d.Message)
			if d.Verdict != Deny || d.Reason != tc.reason {
				t.Fatalf("got %s (%s), want denied (%s): %s", d.Verdict, d.Reason, tc.reason, d.Message)
			}
			for _, s := range tc.said {
				if !strings.Contains(d.Message, s) {
					t.Errorf("message %q does not say %q", d.Message, s)
				}
			}
			if strings.Contains(d.Message, "is not an address of node") {
				t.Errorf("message %q says the SAN twice", d.Message)
			}
		})
	}

	t.Run("a normal node is approved", func(t *testing.T) {
		node := testNode("edge-a", addr(corev1.NodeHostName, "edge-a"), addr(corev1.NodeInternalIP, "192.0.2.10"),
			addr(corev1.NodeInternalIP, "2001:db8::10"), addr(corev1.NodeInternalDNS, "edge-a.lan"))
		r := request{cn: "system:node:edge-a", orgs: []string{"system:nodes"}, dns: []string{"edge-a", "edge-a.lan"}, ips: []string{"192.0.2.10", "2001:db8::10"}}
		csr := servingCSR("csr", "system:node:edge-a", []string{"system:nodes"}, kubeletUsages, x509Request(t, r))
		if d := Decide(csr, node, reservedFor(node)); d.Verdict != Approve {
			t.Fatalf("got %s (%s): %s", d.Verdict, d.Reason, d.Message)
		}
	})

	t.Run("a reserved name is denied before the Node exists", func(t *testing.T) {
		r := request{cn: "system:node:edge-new", orgs: []string{"system:nodes"}, dns: []string{"kubernetes"}}
		csr := servingCSR("csr", "system:node:edge-new", []string{"system:nodes"}, kubeletUsages, x509Request(t, r))
		if d := Decide(csr, nil, reservedFor(testNode("edge-new"))); d.Verdict != Deny || d.Reason != ReasonSANOfAPIServer {
			t.Fatalf("got %s (%s): %s; want denied at once", d.Verdict, d.Reason, d.Message)
		}
	})
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
