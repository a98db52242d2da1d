package csrapprover

import (
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// Client certificate requests of nodes (signer
// kubernetes.io/kube-apiserver-client-kubelet) come in three kinds:
//
//   - made with a node token (requester system:bootstrap:<id>): the
//     approver decides them, binding a new node name to the request's key
//     or checking the key against the one bound at the node's first join;
//   - made by a node as itself with nodeidentity.EnrollLabel: the approver
//     records the request's key when the node has no record yet (a node
//     that joined before records existed), and leaves the approval to
//     upstream's csrapproving controller (selfnodeclient);
//   - any other: not the approver's (a node rotating its certificate is
//     upstream's selfnodeclient's; an admin's request is the admin's).

// ClientKind is which of those a request is.
type ClientKind int

const (
	// NotOurs: left to upstream and to admins.
	NotOurs ClientKind = iota
	// TokenRequest: made with a node token.
	TokenRequest
	// EnrollRequest: made by a node as itself, to record its identity.
	EnrollRequest
)

// Reasons of the conditions on client requests.
const (
	ReasonIdentityMatches    = "NodeIdentityMatches"
	ReasonIdentityBound      = "NodeIdentityBound"
	ReasonNotABootstrapper   = "RequesterNotABootstrapper"
	ReasonIdentityMismatch   = "NodeIdentityMismatch"
	ReasonNodeWithoutRecord  = "NodeExistsWithoutIdentity"
	ReasonClientSubject      = "SubjectNotANode"
	ReasonClientSANs         = "SANsNotAllowed"
	ReasonClientUsages       = "UsagesNotAllowed"
	ReasonClientBadRequest   = "InvalidRequest"
	reasonEnrollNodeMissing  = "NodeNotFound"
	reasonEnrollNodeTooYoung = "NodeNewerThanRequest"
)

// ClassifyClient says which kind of client request csr is. Only requests
// for the kube-apiserver-client-kubelet signer are any kind but NotOurs.
func ClassifyClient(csr *certificatesv1.CertificateSigningRequest) ClientKind {
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		return NotOurs
	}
	if strings.HasPrefix(csr.Spec.Username, bootstrapapi.BootstrapUserPrefix) || slices.Contains(csr.Spec.Groups, bootstrapapi.BootstrapDefaultGroup) {
		return TokenRequest
	}
	if csr.Labels[nodeidentity.EnrollLabel] == nodeidentity.EnrollValue && strings.HasPrefix(csr.Spec.Username, nodeidentity.NodeUserPrefix) {
		return EnrollRequest
	}
	return NotOurs
}

// ClientVerdict is what the approver does with a client request.
type ClientVerdict int

const (
	// Leave the request as it is.
	Leave ClientVerdict = iota
	// ApproveClient approves it.
	ApproveClient
	// DenyClient denies it.
	DenyClient
	// BindThenApprove records the request's key as the node's identity,
	// then approves it (or, when another request bound the name first,
	// decides it again against that record).
	BindThenApprove
	// BindOnly records the request's key as the node's identity and
	// leaves the approval to upstream (enrollment).
	BindOnly
)

func (v ClientVerdict) String() string {
	return [...]string{"left alone", "approved", "denied", "bound and approved", "bound (enrolled)"}[v]
}

// NodeState is what the approver knows of the node a client request names.
type NodeState struct {
	// Record is the node's identity record, when HasRecord.
	Record    nodeidentity.Record
	HasRecord bool
	// NodeCreated is when the Node was created; zero when there is none.
	NodeCreated time.Time
}

// ClientDecision is the verdict on one client request.
type ClientDecision struct {
	Verdict ClientVerdict
	// Node is the node the request is for ("" when it names none).
	Node string
	// Fingerprint is that of the request's key ("" when it does not parse).
	Fingerprint string
	// BoundBy is what a Bind records (with BindThenApprove or BindOnly).
	BoundBy string
	Reason  string
	Message string
}

// checkedClient is the node a client request's subject names ("" when it
// names none), its key's fingerprint and every problem with the request
// itself, whichever kind it is.
type checkedClient struct {
	node        string
	fingerprint string
	problems    []problem
}

// checkClientRequest checks the x509 request of a node client certificate
// and the CSR's signer and usages: what a node's request must be, whoever
// makes it.
func checkClientRequest(csr *certificatesv1.CertificateSigningRequest) checkedClient {
	var c checkedClient
	add := func(reason, format string, args ...any) {
		c.problems = append(c.problems, problem{reason, fmt.Sprintf(format, args...)})
	}
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
		add(ReasonClientBadRequest, "signer %q is not %s", csr.Spec.SignerName, certificatesv1.KubeAPIServerClientKubeletSignerName)
	}
	req, err := parseRequest(csr.Spec.Request)
	if err != nil {
		add(ReasonClientBadRequest, "%v", err)
		return c
	}
	if req.CheckSignature() != nil {
		add(ReasonClientBadRequest, "the x509 request's signature is not valid")
	}
	if fp, err := nodeidentity.Fingerprint(req.PublicKey); err != nil {
		add(ReasonClientBadRequest, "the x509 request's public key: %v", err)
	} else {
		c.fingerprint = fp
	}
	name, ok := strings.CutPrefix(req.Subject.CommonName, nodeidentity.NodeUserPrefix)
	switch {
	case !ok || name == "":
		add(ReasonClientSubject, "subject CN %q is not %s<node name>", req.Subject.CommonName, nodeidentity.NodeUserPrefix)
	case len(validation.IsDNS1123Subdomain(name)) > 0:
		add(ReasonClientSubject, "subject CN %q: %q is not a node name (%s)", req.Subject.CommonName, name, strings.Join(validation.IsDNS1123Subdomain(name), "; "))
	default:
		if _, err := nodeidentity.SecretName(name); err != nil {
			add(ReasonClientSubject, "%v", err)
		} else {
			c.node = name
		}
	}
	if orgs := req.Subject.Organization; len(orgs) != 1 || orgs[0] != user.NodesGroup {
		add(ReasonClientSubject, "subject O %q is not exactly [%s]", orgs, user.NodesGroup)
	}
	var sans []string
	sans = append(sans, req.DNSNames...)
	sans = append(sans, req.EmailAddresses...)
	for _, ip := range req.IPAddresses {
		sans = append(sans, ip.String())
	}
	for _, u := range req.URIs {
		sans = append(sans, u.String())
	}
	if len(sans) > 0 {
		add(ReasonClientSANs, "SANs %q are not allowed: a node's client certificate names no host", sans)
	}
	if msg := checkClientUsages(csr.Spec.Usages); msg != "" {
		add(ReasonClientUsages, "%s", msg)
	}
	return c
}

// checkClientUsages allows what a kubelet asks for: digital signature and
// client auth, and key encipherment (a stock kubelet with an RSA key).
func checkClientUsages(usages []certificatesv1.KeyUsage) string {
	has := map[certificatesv1.KeyUsage]bool{}
	var extra []string
	for _, u := range usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth, certificatesv1.UsageKeyEncipherment:
			has[u] = true
		default:
			extra = append(extra, string(u))
		}
	}
	if len(extra) == 0 && has[certificatesv1.UsageDigitalSignature] && has[certificatesv1.UsageClientAuth] {
		return ""
	}
	return fmt.Sprintf("usages %q are not a kubelet client certificate's (%q and %q, optionally %q)", usages,
		certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth, certificatesv1.UsageKeyEncipherment)
}

// ClientNode is the node name a client request's subject names, "" when
// it names none; the approver reads that node's state before deciding.
func ClientNode(csr *certificatesv1.CertificateSigningRequest) string {
	return checkClientRequest(csr).node
}

// DecideClient judges a node's client certificate request of kind
// ClassifyClient(csr); st is the state of the node ClientNode(csr) names.
func DecideClient(csr *certificatesv1.CertificateSigningRequest, st NodeState) ClientDecision {
	switch ClassifyClient(csr) {
	case TokenRequest:
		return decideToken(csr, st)
	case EnrollRequest:
		return decideEnroll(csr, st)
	}
	return ClientDecision{Verdict: Leave, Reason: "NotOurs", Message: "not a node token's or an enrollment request"}
}

func decideToken(csr *certificatesv1.CertificateSigningRequest, st NodeState) ClientDecision {
	c := checkClientRequest(csr)
	d := ClientDecision{Node: c.node, Fingerprint: c.fingerprint}
	id, isToken := strings.CutPrefix(csr.Spec.Username, bootstrapapi.BootstrapUserPrefix)
	if !isToken || id == "" || !slices.Contains(csr.Spec.Groups, bootstrapapi.BootstrapDefaultGroup) {
		c.problems = append([]problem{{ReasonNotABootstrapper, fmt.Sprintf("requester %q (groups %s) is not a node token (%s<id> in group %s)",
			csr.Spec.Username, strings.Join(csr.Spec.Groups, ", "), bootstrapapi.BootstrapUserPrefix, bootstrapapi.BootstrapDefaultGroup)}}, c.problems...)
	}
	if len(c.problems) > 0 {
		msgs := make([]string, len(c.problems))
		for i, p := range c.problems {
			msgs[i] = p.message
		}
		d.Verdict, d.Reason = DenyClient, c.problems[0].reason
		d.Message = "edgeplane denied this node client certificate: " + strings.Join(msgs, "; ")
		return d
	}
	switch {
	case st.HasRecord && st.Record.Fingerprint == c.fingerprint:
		d.Verdict, d.Reason = ApproveClient, ReasonIdentityMatches
		d.Message = fmt.Sprintf("edgeplane approved node %s's client certificate: its key is the identity bound %s", c.node, boundHow(st.Record))
	case st.HasRecord:
		d.Verdict, d.Reason = DenyClient, ReasonIdentityMismatch
		d.Message = fmt.Sprintf("edgeplane denied this node client certificate: node %s's identity was bound %s, and this request's key (%s) is not that key (%s). "+
			"Only the node that first joined as %s may join again under that name. If %s was reinstalled, run `edgeplane node forget %s` on a server, then join again",
			c.node, boundHow(st.Record), c.fingerprint, st.Record.Fingerprint, c.node, c.node, c.node)
	case !st.NodeCreated.IsZero():
		d.Verdict, d.Reason = DenyClient, ReasonNodeWithoutRecord
		d.Message = fmt.Sprintf("edgeplane denied this node client certificate: node %s exists and has no recorded identity: it is a server's own node, "+
			"or a node that joined before identities were recorded (that node records its identity itself at its next start). "+
			"If %s is a node reinstalled under that name, run `edgeplane node forget %s` on a server, then join again", c.node, c.node, c.node)
	default:
		d.Verdict, d.Reason = BindThenApprove, ReasonIdentityBound
		d.BoundBy = "token " + id
		d.Message = fmt.Sprintf("edgeplane approved node %s's first client certificate and bound the name to its key %s (node token %s)", c.node, c.fingerprint, id)
	}
	return d
}

func decideEnroll(csr *certificatesv1.CertificateSigningRequest, st NodeState) ClientDecision {
	c := checkClientRequest(csr)
	d := ClientDecision{Verdict: Leave, Node: c.node, Fingerprint: c.fingerprint}
	self, _ := strings.CutPrefix(csr.Spec.Username, nodeidentity.NodeUserPrefix)
	switch {
	case len(c.problems) > 0:
		d.Reason, d.Message = c.problems[0].reason, "not enrolled: "+c.problems[0].message
	case self != c.node || !slices.Contains(csr.Spec.Groups, user.NodesGroup):
		d.Reason = ReasonClientSubject
		d.Message = fmt.Sprintf("not enrolled: requester %q (groups %s) is not the node %s in group %s", csr.Spec.Username, strings.Join(csr.Spec.Groups, ", "), c.node, user.NodesGroup)
	case st.HasRecord:
		d.Reason, d.Message = ReasonIdentityMatches, fmt.Sprintf("node %s's identity is already bound %s", c.node, boundHow(st.Record))
	case st.NodeCreated.IsZero():
		// A node's credentials outlive its Node when an admin deletes it
		// (`edgeplane node forget` does): only a node that is registered
		// may enroll.
		d.Reason, d.Message = reasonEnrollNodeMissing, fmt.Sprintf("not enrolled: node %s does not exist", c.node)
	case st.NodeCreated.After(csr.CreationTimestamp.Time):
		// The request is older than the Node: it was made for a Node
		// that was deleted since (forgotten), and is not replayed.
		d.Reason, d.Message = reasonEnrollNodeTooYoung, fmt.Sprintf("not enrolled: node %s was created after this request", c.node)
	default:
		d.Verdict, d.Reason, d.BoundBy = BindOnly, ReasonIdentityBound, "enrollment"
		d.Message = fmt.Sprintf("bound node %s to its identity key %s (enrollment)", c.node, c.fingerprint)
	}
	return d
}

// boundHow says when and by whom a record was bound.
func boundHow(r nodeidentity.Record) string {
	s := "at its first join"
	if r.BoundBy != "" {
		s += " (" + r.BoundBy
		if !r.BoundAt.IsZero() {
			s += ", " + r.BoundAt.UTC().Format(time.RFC3339)
		}
		s += ")"
	}
	return s
}
