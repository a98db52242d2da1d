package csrapprover

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// TestApproverAgainstAPIServer runs the approver against a real API server
// on SQLite, with the controller-manager's identity given ClusterRole by
// EnsureRBAC, and the controller-manager itself to sign what it approves.
// Requests are made as the nodes would make them (impersonated node users).
func TestApproverAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server and the controller-manager")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	pki := srv.PKI

	adminCfg, err := clientcmd.BuildConfigFromFlags("", pki.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	asNode := func(name string) kubernetes.Interface {
		cfg := rest.CopyConfig(adminCfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes"}}
		return kubernetes.NewForConfigOrDie(cfg)
	}

	// The signer: the controller-manager signs approved kubelet serving
	// requests with the cluster (serving) CA.
	_, serviceCIDR, _ := net.ParseCIDR("10.43.0.0/16")
	cm, err := controllers.NewControllerManager(controllers.Options{PKI: pki, ServiceCIDR: serviceCIDR})
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cm.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})

	createNode(t, ctx, admin, "edge-a", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.0.10"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "edge-a"})
	createNode(t, ctx, admin, "edge-b", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.0.11"})
	// The API server's own address is left out of the approver's
	// options: it finds it in the kubernetes Service's EndpointSlice.
	endpoint := apiServerEndpoint(t, ctx, admin)
	// edge-evil reports the API server's names as its own addresses.
	createNode(t, ctx, admin, "edge-evil", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.0.66"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "kubernetes.default.svc.cluster.local"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "10.43.0.1"},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: endpoint.String()})

	// A request decided before the approver starts stays as it is.
	predecided := createCSR(t, ctx, asNode("edge-a"), "predecided", request{cn: "system:node:edge-a", orgs: []string{"system:nodes"}, ips: []string{"10.99.0.10"}})
	predecided.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "ByHand", Message: "an operator said no",
	}}
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, predecided.Name, predecided, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The approver, as the controller-manager's user with ClusterRole.
	if err := EnsureRBAC(ctx, admin, "system:kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	if err := EnsureRBAC(ctx, admin, "system:kube-controller-manager"); err != nil {
		t.Fatalf("EnsureRBAC again: %v", err)
	}
	// A widened role is narrowed back.
	widened := ClusterRole()
	widened.Rules = append(widened.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
	if _, err := admin.RbacV1().ClusterRoles().Update(ctx, widened, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureRBAC(ctx, admin, "system:kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	if cr, err := admin.RbacV1().ClusterRoles().Get(ctx, ClusterRoleName, metav1.GetOptions{}); err != nil || !equality.Semantic.DeepEqual(cr.Rules, ClusterRole().Rules) {
		t.Fatalf("ClusterRole after EnsureRBAC: %+v, %v; want its rules narrowed back", cr, err)
	}
	if rb, err := admin.RbacV1().RoleBindings(nodeidentity.Namespace).Get(ctx, RecordsRoleName, metav1.GetOptions{}); err != nil || rb.Subjects[0].Name != "system:kube-controller-manager" {
		t.Fatalf("RoleBinding %s: %+v, %v", RecordsRoleName, rb, err)
	}
	approverCfg, err := clientcmd.BuildConfigFromFlags("", pki.ControllerManagerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	const nodeWait = 8 * time.Second
	// Nodes from the API server's informers, as the server runs it.
	c, err := New(kubernetes.NewForConfigOrDie(approverCfg), Options{NodeWait: nodeWait, APIServer: APIServer{
		ClusterDomain: "cluster.local", ServiceIPs: []net.IP{net.ParseIP("10.43.0.1")},
	}, Informers: srv.Chain.Informers()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	t.Cleanup(func() { cancel(); <-done })

	nodeA := request{cn: "system:node:edge-a", orgs: []string{"system:nodes"}, dns: []string{"edge-a"}, ips: []string{"10.99.0.10"}}
	tests := []struct {
		name   string
		client kubernetes.Interface
		req    request
		want   certificatesv1.RequestConditionType
		reason string
		said   []string
	}{
		{name: "own-addresses", client: asNode("edge-a"), req: nodeA, want: certificatesv1.CertificateApproved, reason: ReasonApproved},
		{name: "foreign-ip", client: asNode("edge-a"), req: request{cn: nodeA.cn, orgs: nodeA.orgs, dns: nodeA.dns, ips: []string{"10.99.0.10", "10.99.0.77"}},
			want: certificatesv1.CertificateDenied, reason: ReasonSANNotOfNode, said: []string{"IP SAN 10.99.0.77 is not an address of node edge-a"}},
		{name: "foreign-dns", client: asNode("edge-a"), req: request{cn: nodeA.cn, orgs: nodeA.orgs, dns: []string{"edge-a", "edge-z.example"}},
			want: certificatesv1.CertificateDenied, reason: ReasonSANNotOfNode, said: []string{`DNS SAN "edge-z.example"`}},
		// edge-evil reports the API server's names as its own addresses.
		{name: "reported-service-name", client: asNode("edge-evil"), req: request{cn: "system:node:edge-evil", orgs: nodeA.orgs, dns: []string{"kubernetes.default.svc.cluster.local"}},
			want: certificatesv1.CertificateDenied, reason: ReasonSANOfAPIServer, said: []string{`DNS SAN "kubernetes.default.svc.cluster.local" names the API server`}},
		{name: "reported-service-ip", client: asNode("edge-evil"), req: request{cn: "system:node:edge-evil", orgs: nodeA.orgs, ips: []string{"10.43.0.1"}},
			want: certificatesv1.CertificateDenied, reason: ReasonSANOfAPIServer, said: []string{ruleServiceIP}},
		{name: "reported-endpoint", client: asNode("edge-evil"), req: request{cn: "system:node:edge-evil", orgs: nodeA.orgs, ips: []string{endpoint.String()}},
			want: certificatesv1.CertificateDenied, reason: ReasonSANOfAPIServer, said: []string{ruleEndpoint}},
		{name: "not-a-node", client: admin, req: nodeA,
			want: certificatesv1.CertificateDenied, reason: ReasonNotANode, said: []string{`requester "admin" is not a node`}},
		{name: "other-nodes-ip", client: asNode("edge-b"), req: request{cn: "system:node:edge-b", orgs: nodeA.orgs, dns: []string{"edge-b"}, ips: []string{"10.99.0.10"}},
			want: certificatesv1.CertificateDenied, reason: ReasonSANOfOtherNode, said: []string{`DNS SAN "edge-b" is not an address of node edge-b`, `IP SAN "10.99.0.10" names node edge-a`}},
		{name: "no-such-node", client: asNode("ghost"), req: request{cn: "system:node:ghost", orgs: nodeA.orgs, ips: []string{"10.99.0.20"}},
			want: certificatesv1.CertificateDenied, reason: ReasonNodeNotFound, said: []string{`node "ghost" does not exist`, "it waits 8s"}},
	}
	for _, tc := range tests {
		createCSR(t, ctx, tc.client, tc.name, tc.req)
	}
	// A node cannot even create a request in another node's name: the
	// API server's NodeRestriction admission refuses it before the
	// approver sees it (Decide denies it too: TestDecide).
	_, err = asNode("edge-b").CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "other-nodes-name"},
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: x509Request(t, nodeA), SignerName: certificatesv1.KubeletServingSignerName, Usages: kubeletUsages},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("edge-b creating a request for system:node:edge-a: %v, want Forbidden by NodeRestriction", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			csr := waitDecided(t, ctx, admin, tc.name, 30*time.Second+nodeWait)
			cond := csr.Status.Conditions[0]
			t.Logf("%s %s: %s", cond.Type, cond.Reason, cond.Message)
			if len(csr.Status.Conditions) != 1 || cond.Type != tc.want || cond.Reason != tc.reason {
				t.Fatalf("conditions %+v, want one %s with reason %s", csr.Status.Conditions, tc.want, tc.reason)
			}
			for _, s := range tc.said {
				if !strings.Contains(cond.Message, s) {
					t.Errorf("message %q does not say %q", cond.Message, s)
				}
			}
			if tc.reason == ReasonNodeNotFound {
				// Timestamps have whole seconds.
				if waited := cond.LastUpdateTime.Sub(csr.CreationTimestamp.Time); waited < nodeWait-time.Second || waited > nodeWait+5*time.Second {
					t.Errorf("denied %s after the request, want after waiting %s for the node, and not much longer", waited, nodeWait)
				}
			}
		})
	}

	t.Run("late-node", func(t *testing.T) {
		// The request comes before its Node: the approver waits, then
		// approves once the Node has its addresses.
		createCSR(t, ctx, asNode("edge-late"), "late", request{cn: "system:node:edge-late", orgs: nodeA.orgs, ips: []string{"10.99.0.30"}})
		poll(t, ctx, "the approver to retry the request", 20*time.Second, func(context.Context) (bool, error) {
			return c.queue.NumRequeues("late") > 0, nil
		})
		createNode(t, ctx, admin, "edge-late", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.0.30"})
		csr := waitDecided(t, ctx, admin, "late", 30*time.Second)
		if cond := csr.Status.Conditions[0]; cond.Type != certificatesv1.CertificateApproved {
			t.Fatalf("condition %+v, want Approved", cond)
		}
	})

	t.Run("signed", func(t *testing.T) {
		var csr *certificatesv1.CertificateSigningRequest
		poll(t, ctx, "the controller-manager to sign the approved request", 90*time.Second, func(ctx context.Context) (bool, error) {
			var err error
			csr, err = admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "own-addresses", metav1.GetOptions{})
			return err == nil && len(csr.Status.Certificate) > 0, err
		})
		block, _ := pem.Decode(csr.Status.Certificate)
		if block == nil {
			t.Fatalf("status.certificate is not PEM: %q", csr.Status.Certificate)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		// Kubelet serving certificates come from the kubelet-serving CA,
		// which only the API server trusts; never from the server CA
		// that clients and pods trust for the API server.
		roots, err := certutil.NewPool(pki.KubeletServingCA.Cert)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "edge-a", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("signed certificate does not verify against the kubelet-serving CA for edge-a: %v", err)
		}
		serverRoots, err := certutil.NewPool(pki.ServerCA.Cert)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: serverRoots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("a kubelet serving certificate verifies against the server CA, which pods trust for the API server")
		}
		if cert.Subject.CommonName != "system:node:edge-a" || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("10.99.0.10")) {
			t.Errorf("certificate for %s with IPs %v, want system:node:edge-a with 10.99.0.10", cert.Subject.CommonName, cert.IPAddresses)
		}
		for _, name := range []string{"foreign-ip", "not-a-node"} {
			denied, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(denied.Status.Certificate) > 0 {
				t.Errorf("denied request %s was signed", name)
			}
		}
	})

	t.Run("predecided-left-alone", func(t *testing.T) {
		csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "predecided", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(csr.Status.Conditions) != 1 || csr.Status.Conditions[0].Reason != "ByHand" {
			t.Errorf("conditions %+v, want only the operator's Denied", csr.Status.Conditions)
		}
	})

	t.Run("role-is-needed", func(t *testing.T) {
		// The approver's identity may set approvals with the binding and
		// may not without it: the role is what grants it. Dry runs, so
		// that nothing changes.
		cmClient := kubernetes.NewForConfigOrDie(approverCfg)
		dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
		csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "own-addresses", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cmClient.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, dryRun); err != nil {
			t.Fatalf("approval update with the role: %v", err)
		}
		if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, ClusterRoleName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// RBAC reads bindings from a watch cache: poll until it has
		// dropped this one.
		poll(t, ctx, "approval without the role to be forbidden", 30*time.Second, func(ctx context.Context) (bool, error) {
			_, err := cmClient.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, dryRun)
			return apierrors.IsForbidden(err), nil
		})
	})
}

// apiServerEndpoint is the API server's address in the kubernetes
// Service's EndpointSlice, once it is there.
func apiServerEndpoint(t *testing.T, ctx context.Context, admin kubernetes.Interface) net.IP {
	t.Helper()
	var ip net.IP
	poll(t, ctx, "the kubernetes Service's EndpointSlice", time.Minute, func(ctx context.Context) (bool, error) {
		list, err := admin.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
		if err != nil {
			return false, err
		}
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				for _, a := range e.Addresses {
					ip = net.ParseIP(a)
				}
			}
		}
		return ip != nil, nil
	})
	return ip
}

// createNode creates a Node and sets its addresses, as a kubelet
// registering does.
func createNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, addrs ...corev1.NodeAddress) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = addrs
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// createCSR creates a kubelet serving request named name with client's
// identity, with the usages a kubelet asks for.
func createCSR(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, r request) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    x509Request(t, r),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     slices.Clone(kubeletUsages),
		},
	}
	out, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CSR %s: %v", name, err)
	}
	return out
}

// waitDecided waits for the request to be approved or denied.
func waitDecided(t *testing.T, ctx context.Context, client kubernetes.Interface, name string, timeout time.Duration) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var csr *certificatesv1.CertificateSigningRequest
	poll(t, ctx, "CSR "+name+" to be decided", timeout, func(ctx context.Context) (bool, error) {
		var err error
		csr, err = client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return err == nil && decided(csr), err
	})
	return csr
}

func poll(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond wait.ConditionWithContextFunc) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			lastErr = err
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, lastErr)
	}
}
