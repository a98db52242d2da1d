package csrapprover

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// nodeUserPrefix is how a node's user name starts: system:node:<name>.
const nodeUserPrefix = "system:node:"

// Verdict is what the approver does with a request.
type Verdict int

const (
	// Approve the request: the node asks for a certificate of its own
	// addresses.
	Approve Verdict = iota
	// Deny the request for good.
	Deny
	// WaitForNode: the request is well formed but its Node does not exist
	// yet or has no addresses; ask again later, deny after a while.
	WaitForNode
)

func (v Verdict) String() string {
	switch v {
	case Approve:
		return "approved"
	case Deny:
		return "denied"
	}
	return "waiting for the node"
}

// Reasons of the conditions the approver sets (CamelCase, as condition
// reasons are).
const (
	ReasonApproved         = "AutoApproved"
	ReasonNotANode         = "RequesterNotANode"
	ReasonBadRequest       = "InvalidRequest"
	ReasonSubject          = "SubjectNotTheNode"
	ReasonUsages           = "UsagesNotAllowed"
	ReasonSANs             = "SANsNotAllowed"
	ReasonSANNotOfNode     = "SANNotOfNode"
	ReasonSANOfAPIServer   = "SANNamesAPIServer"
	ReasonSANOfOtherNode   = "SANOfAnotherNode"
	ReasonNodeNotFound     = "NodeNotFound"
	ReasonNodeHasNoAddress = "NodeHasNoAddresses"
)

// Decision is the verdict on one request, with the condition's reason and
// a message that says exactly what is wrong.
type Decision struct {
	Verdict Verdict
	// Node is the node the request is for, from its requester or its
	// subject ("" when neither names one).
	Node    string
	Reason  string
	Message string
}

// problem is one rule a request breaks.
type problem struct{ reason, message string }

// NodeOf is the node name a kubelet serving request is made for: that of
// its requester when the requester is a node, else that of the subject of
// its x509 request (for messages), else "".
func NodeOf(csr *certificatesv1.CertificateSigningRequest) string {
	if name, ok := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix); ok && name != "" {
		return name
	}
	if req, err := parseRequest(csr.Spec.Request); err == nil {
		if name, ok := strings.CutPrefix(req.Subject.CommonName, nodeUserPrefix); ok {
			return name
		}
	}
	return ""
}

// Decide judges a kubelet serving request. node is the Node the requester
// names (nil when there is none); reserved is what no node, or no other
// node, may have a certificate for. Every problem is listed in the
// message; the reason is the first problem's. The request alone is judged
// first: a malformed one, or one that names the API server or another
// node, is denied whether or not its Node exists.
func Decide(csr *certificatesv1.CertificateSigningRequest, node *corev1.Node, reserved Reserved) Decision {
	name, req, problems := checkRequest(csr)
	d := Decision{Node: name}
	if name == "" {
		d.Node = NodeOf(csr)
	}
	var forbidden map[string]bool // SANs already said to be reserved
	if req != nil {
		var p []problem
		p, forbidden = checkReserved(req, name, reserved)
		problems = append(problems, p...)
	}
	hasAddresses := node != nil && len(nodeAddresses(node)) > 0
	switch {
	case len(problems) == 0 && node == nil:
		return Decision{Verdict: WaitForNode, Node: name, Reason: ReasonNodeNotFound,
			Message: fmt.Sprintf("node %q does not exist: a kubelet registers its Node before it asks for a serving certificate", name)}
	case len(problems) == 0 && !hasAddresses:
		return Decision{Verdict: WaitForNode, Node: name, Reason: ReasonNodeHasNoAddress,
			Message: fmt.Sprintf("node %q has no addresses in its status to check the certificate's names against", name)}
	case req != nil && name != "" && hasAddresses:
		problems = append(problems, checkSANs(req, node, forbidden)...)
	}
	if len(problems) == 0 {
		d.Verdict, d.Reason = Approve, ReasonApproved
		d.Message = fmt.Sprintf("edgeplane approved node %s's serving certificate for its own addresses %s", name, strings.Join(sanList(req), ", "))
		return d
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.message
	}
	d.Verdict, d.Reason = Deny, problems[0].reason
	d.Message = "edgeplane denied this kubelet serving certificate: " + strings.Join(msgs, "; ")
	return d
}

// checkRequest checks what does not depend on the Node: who asks, the
// subject, the usages and the kinds of SANs. It returns the node name of
// the requester ("" when the requester is not a node) and the parsed x509
// request (nil when it does not parse).
func checkRequest(csr *certificatesv1.CertificateSigningRequest) (string, *x509.CertificateRequest, []problem) {
	var problems []problem
	add := func(reason, format string, args ...any) {
		problems = append(problems, problem{reason, fmt.Sprintf(format, args...)})
	}

	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		add(ReasonBadRequest, "signer %q is not %s", csr.Spec.SignerName, certificatesv1.KubeletServingSignerName)
	}

	name, isNode := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix)
	switch {
	case !isNode || name == "":
		add(ReasonNotANode, "requester %q is not a node (system:node:<name>): only a node may ask for its own serving certificate", csr.Spec.Username)
		name = ""
	case !slices.Contains(csr.Spec.Groups, user.NodesGroup):
		add(ReasonNotANode, "requester %q is not in group %s (its groups: %s)", csr.Spec.Username, user.NodesGroup, strings.Join(csr.Spec.Groups, ", "))
	}

	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		add(ReasonBadRequest, "%v", err)
		return name, nil, problems
	}
	if req.CheckSignature() != nil {
		add(ReasonBadRequest, "the x509 request's signature is not valid")
	}

	switch cn := req.Subject.CommonName; {
	case name != "" && cn != csr.Spec.Username:
		add(ReasonSubject, "subject CN %q is not the requester's %q", cn, csr.Spec.Username)
	case name == "" && !strings.HasPrefix(cn, nodeUserPrefix):
		add(ReasonSubject, "subject CN %q is not %s<name>", cn, nodeUserPrefix)
	}
	if orgs := req.Subject.Organization; len(orgs) != 1 || orgs[0] != user.NodesGroup {
		add(ReasonSubject, "subject O %q is not exactly [%s]", orgs, user.NodesGroup)
	}

	if msg := checkUsages(csr.Spec.Usages); msg != "" {
		add(ReasonUsages, "%s", msg)
	}

	for _, e := range req.EmailAddresses {
		add(ReasonSANs, "email SAN %q is not allowed in a node's serving certificate", e)
	}
	for _, u := range req.URIs {
		add(ReasonSANs, "URI SAN %q is not allowed in a node's serving certificate", u.String())
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		add(ReasonSANs, "no DNS or IP SAN: a serving certificate must name at least one of the node's addresses")
	}
	return name, req, problems
}

// checkUsages allows exactly what the kubelet asks for: digital signature
// and server auth, and key encipherment (RSA keys) if it wants.
func checkUsages(usages []certificatesv1.KeyUsage) string {
	var extra []string
	has := map[certificatesv1.KeyUsage]bool{}
	for _, u := range usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageKeyEncipherment:
			has[u] = true
		default:
			extra = append(extra, string(u))
		}
	}
	var missing []string
	for _, u := range []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth} {
		if !has[u] {
			missing = append(missing, string(u))
		}
	}
	var msgs []string
	if len(extra) > 0 {
		msgs = append(msgs, fmt.Sprintf("usages %q are not a kubelet serving certificate's", extra))
	}
	if len(missing) > 0 {
		msgs = append(msgs, fmt.Sprintf("usages %q are missing", missing))
	}
	if len(msgs) == 0 {
		return ""
	}
	return strings.Join(msgs, ", ") + fmt.Sprintf(" (allowed: %q, %q, and optionally %q)",
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageKeyEncipherment)
}

// checkReserved lists every DNS and IP SAN that names the API server, this
// host, or a node other than self, whatever node self reports as its own
// addresses: a Node's addresses are written by its kubelet. It returns
// the SANs it found (as sanKey) so that they are said once.
func checkReserved(req *x509.CertificateRequest, self string, reserved Reserved) ([]problem, map[string]bool) {
	var problems []problem
	found := map[string]bool{}
	add := func(kind, san, rule, whose string) {
		reason := ReasonSANOfAPIServer
		switch rule {
		case ruleWildcard:
			reason = ReasonSANs
		case ruleOtherName:
			reason = ReasonSANOfOtherNode
		default:
			if strings.HasPrefix(rule, ruleOtherAddress) {
				reason = ReasonSANOfOtherNode
			}
		}
		msg := fmt.Sprintf("%s SAN %q names %s (rule: no node's serving certificate may name %s)", kind, san, whose, rule)
		if whose == "" {
			msg = fmt.Sprintf("%s SAN %q is %s", kind, san, rule)
		}
		problems = append(problems, problem{reason, msg})
		found[kind+" "+san] = true
	}
	for _, dns := range req.DNSNames {
		if rule, whose := reserved.dnsRule(dns, self); rule != "" {
			add("DNS", dns, rule, whose)
		}
	}
	for _, ip := range req.IPAddresses {
		if rule, whose := reserved.ipRule(ip, self); rule != "" {
			add("IP", ip.String(), rule, whose)
		}
	}
	return problems, found
}

// checkSANs lists every DNS and IP SAN that is not one of node's
// addresses, but those in said (already reported by checkReserved).
func checkSANs(req *x509.CertificateRequest, node *corev1.Node, said map[string]bool) []problem {
	addrs := nodeAddresses(node)
	var have []string
	for _, a := range addrs {
		have = append(have, a.Address)
	}
	var problems []problem
	for _, dns := range req.DNSNames {
		if said["DNS "+dns] {
			continue
		}
		if !slices.ContainsFunc(addrs, func(a corev1.NodeAddress) bool { return dnsKey(a.Address) == dnsKey(dns) }) {
			problems = append(problems, problem{ReasonSANNotOfNode, fmt.Sprintf("DNS SAN %q is not an address of node %s (its addresses: %s)", dns, node.Name, strings.Join(have, ", "))})
		}
	}
	for _, ip := range req.IPAddresses {
		if said["IP "+ip.String()] {
			continue
		}
		if !slices.ContainsFunc(addrs, func(a corev1.NodeAddress) bool { return ip.Equal(net.ParseIP(a.Address)) }) {
			problems = append(problems, problem{ReasonSANNotOfNode, fmt.Sprintf("IP SAN %s is not an address of node %s (its addresses: %s)", ip, node.Name, strings.Join(have, ", "))})
		}
	}
	return problems
}

// nodeAddresses are the node's addresses of the kinds a serving
// certificate may name.
func nodeAddresses(node *corev1.Node) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			if a.Address != "" {
				out = append(out, a)
			}
		}
	}
	return out
}

func parseRequest(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("spec.request is not a PEM \"CERTIFICATE REQUEST\"")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request does not parse: %v", err)
	}
	return req, nil
}

func sanList(req *x509.CertificateRequest) []string {
	out := slices.Clone(req.DNSNames)
	for _, ip := range req.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}
