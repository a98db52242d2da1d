package csrapprover

import (
	"context"
	"crypto/ecdsa"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"
	kubeletbootstrap "k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/pkg/controllers"
	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// TestNodeTokenRequestsAgainstAPIServer: a real API server (bootstrap
// token authentication on), the controller-manager (upstream's
// csrapproving and csrsigning controllers) and the approver. A client that
// holds a real node token asks for node client certificates as a joining
// node does: the first request for a new name is approved and binds the
// name to its key; a request for that name with another key gets no
// certificate; so does a request for a Node that has no record, Ready or
// not, and for the server's own node; a node that joined before records
// existed records its key by enrollment; forgetting a node lets another key
// in. The cluster starts with the auto-approval binding an earlier version
// made, which the controller-manager's start deletes.
func TestNodeTokenRequestsAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server and the controller-manager")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pki := testapiserver.Start(t, ctx).PKI
	adminCfg, err := clientcmd.BuildConfigFromFlags("", pki.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(adminCfg)

	// An upgraded cluster: what an earlier version made lets upstream
	// approve every node token's client request.
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, retiredBinding(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

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
	poll(t, ctx, "the controller-manager to delete "+controllers.RetiredAutoApproveBinding, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, controllers.RetiredAutoApproveBinding, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	if err := EnsureRBAC(ctx, admin, "system:kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	approverCfg, err := clientcmd.BuildConfigFromFlags("", pki.ControllerManagerKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(kubernetes.NewForConfigOrDie(approverCfg), Options{APIServer: APIServer{
		ClusterDomain: "cluster.local", ServiceIPs: []net.IP{net.ParseIP("10.43.0.1")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, 2) }()
	t.Cleanup(func() { cancel(); <-done })

	// A real node token, and a client that authenticates with it.
	tok, err := nodetoken.Create(ctx, admin, nodetoken.CreateOptions{TTL: time.Hour, Description: "approver test"})
	if err != nil {
		t.Fatal(err)
	}
	tokenCfg := rest.AnonymousClientConfig(adminCfg)
	tokenCfg.BearerToken = tok.BootstrapToken()
	asToken := kubernetes.NewForConfigOrDie(tokenCfg)
	poll(t, ctx, "the node token to authenticate", 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := asToken.CertificatesV1().CertificateSigningRequests().Get(ctx, "none", metav1.GetOptions{})
		return err == nil || !apierrors.IsUnauthorized(err), nil
	})
	asNode := func(name string) kubernetes.Interface {
		cfg := rest.CopyConfig(adminCfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	keys := map[string]*ecdsa.PrivateKey{}
	key := func(name string) *ecdsa.PrivateKey {
		if keys[name] == nil {
			keys[name] = newKey(t)
		}
		return keys[name]
	}
	request := func(client kubernetes.Interface, csrName, node string, k *ecdsa.PrivateKey, labels map[string]string) {
		t.Helper()
		req, err := nodeidentity.ClientRequest(k, node)
		if err != nil {
			t.Fatal(err)
		}
		_, err = client.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: csrName, Labels: labels},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request: req, SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName, Usages: clientUsages,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create CSR %s: %v", csrName, err)
		}
	}
	// expect waits for the decision on csrName: approved and signed, or
	// denied with reason, saying said, and never signed.
	expect := func(t *testing.T, csrName string, approved bool, reason string, said ...string) {
		t.Helper()
		csr := waitDecided(t, ctx, admin, csrName, time.Minute)
		cond := csr.Status.Conditions[0]
		t.Logf("%s: %s %s: %s", csrName, cond.Type, cond.Reason, cond.Message)
		want := certificatesv1.CertificateDenied
		if approved {
			want = certificatesv1.CertificateApproved
		}
		if cond.Type != want || (reason != "" && cond.Reason != reason) {
			t.Fatalf("%s: %s %s (%s), want %s %s", csrName, cond.Type, cond.Reason, cond.Message, want, reason)
		}
		for _, s := range said {
			if !strings.Contains(cond.Message, s) {
				t.Errorf("%s: message %q does not say %q", csrName, cond.Message, s)
			}
		}
		if approved {
			poll(t, ctx, csrName+" to be signed", time.Minute, func(ctx context.Context) (bool, error) {
				csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csrName, metav1.GetOptions{})
				return err == nil && len(csr.Status.Certificate) > 0, err
			})
			return
		}
		if len(csr.Status.Certificate) > 0 || hasCondition(csr, certificatesv1.CertificateApproved) {
			t.Fatalf("%s: denied, yet approved or signed: %+v", csrName, csr.Status)
		}
	}
	expectRecord := func(t *testing.T, node string, k *ecdsa.PrivateKey, boundBy string) {
		t.Helper()
		r, ok, err := nodeidentity.Get(ctx, admin, node)
		if err != nil || !ok {
			t.Fatalf("record of %s: %v, %v", node, ok, err)
		}
		if r.Fingerprint != fingerprint(t, k) || r.BoundBy != boundBy {
			t.Fatalf("record of %s: %+v, want fingerprint %s bound by %q", node, r, fingerprint(t, k), boundBy)
		}
	}

	t.Run("new name: approved and bound", func(t *testing.T) {
		request(asToken, "new-first", "edge-new", key("new-1"), nil)
		expect(t, "new-first", true, ReasonIdentityBound)
		expectRecord(t, "edge-new", key("new-1"), "token "+tok.ID)
	})
	t.Run("same name, another key: denied", func(t *testing.T) {
		request(asToken, "new-other-key", "edge-new", key("new-2"), nil)
		expect(t, "new-other-key", false, ReasonIdentityMismatch, "node edge-new's identity was bound", "edgeplane node forget edge-new")
		expectRecord(t, "edge-new", key("new-1"), "token "+tok.ID)
	})
	t.Run("same name, its own key again: approved", func(t *testing.T) {
		request(asToken, "new-rejoin", "edge-new", key("new-1"), nil)
		expect(t, "new-rejoin", true, ReasonIdentityMatches)
	})
	for _, ready := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse} {
		name := "edge-old-ready-" + strings.ToLower(string(ready))
		t.Run("an existing Node without a record, Ready="+string(ready)+": denied", func(t *testing.T) {
			createNode(t, ctx, admin, name, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.1.1"})
			setReady(t, ctx, admin, name, ready)
			request(asToken, name+"-takeover", name, key(name+"-thief"), nil)
			expect(t, name+"-takeover", false, ReasonNodeWithoutRecord, "node "+name+" exists and has no recorded identity", "edgeplane node forget "+name)
			if _, ok, err := nodeidentity.Get(ctx, admin, name); ok || err != nil {
				t.Fatalf("a denied request left a record for %s (%v, %v)", name, ok, err)
			}
		})
	}
	t.Run("the server's own node: denied", func(t *testing.T) {
		// As the server does before its kubelet starts.
		if _, bound, err := nodeidentity.Bind(ctx, admin, nodeidentity.Record{Node: "ctl-1", Fingerprint: fingerprint(t, key("ctl-1")), BoundBy: "server"}); err != nil || !bound {
			t.Fatalf("bind the server's node: %v, %v", bound, err)
		}
		createNode(t, ctx, admin, "ctl-1", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.1.2"})
		setReady(t, ctx, admin, "ctl-1", corev1.ConditionTrue)
		request(asToken, "ctl-takeover", "ctl-1", key("ctl-thief"), nil)
		expect(t, "ctl-takeover", false, ReasonIdentityMismatch, "(server")
	})
	old := "edge-old-ready-true"
	t.Run("enrollment of a node that joined before records", func(t *testing.T) {
		request(asNode(old), "old-enroll", old, key("old"), map[string]string{nodeidentity.EnrollLabel: nodeidentity.EnrollValue})
		poll(t, ctx, "the enrollment to bind "+old, 30*time.Second, func(ctx context.Context) (bool, error) {
			_, ok, err := nodeidentity.Get(ctx, admin, old)
			return ok, err
		})
		expectRecord(t, old, key("old"), "enrollment")
		// Upstream's selfnodeclient approval approves the request itself.
		expect(t, "old-enroll", true, "")
		request(asToken, "old-rejoin", old, key("old"), nil)
		expect(t, "old-rejoin", true, ReasonIdentityMatches)
		request(asToken, "old-takeover-2", old, key(old+"-thief"), nil)
		expect(t, "old-takeover-2", false, ReasonIdentityMismatch)
	})
	t.Run("a race for a new name binds one key", func(t *testing.T) {
		var wg sync.WaitGroup
		for _, n := range []string{"race-a", "race-b"} {
			k := key(n)
			wg.Go(func() { request(asToken, n, "edge-race", k, nil) })
		}
		wg.Wait()
		a := waitDecided(t, ctx, admin, "race-a", time.Minute)
		b := waitDecided(t, ctx, admin, "race-b", time.Minute)
		winner, loser := "race-a", b
		if hasCondition(b, certificatesv1.CertificateApproved) {
			winner, loser = "race-b", a
		}
		if hasCondition(loser, certificatesv1.CertificateApproved) || loser.Status.Conditions[0].Reason != ReasonIdentityMismatch {
			t.Fatalf("both or neither approved: %s %+v, %s %+v", a.Name, a.Status.Conditions, b.Name, b.Status.Conditions)
		}
		expectRecord(t, "edge-race", key(winner), "token "+tok.ID)
	})
	t.Run("a stock kubelet's TLS bootstrap (kubeadm join)", func(t *testing.T) {
		// Upstream's kubelet code: it makes a key for its first request,
		// and after its certificate is lost (or expired: rotation
		// changes its key) bootstraps with another.
		dir := t.TempDir()
		bootstrapKubeconfig := filepath.Join(dir, "bootstrap-kubelet.conf")
		kc := clientcmdapi.NewConfig()
		kc.Clusters["c"] = &clientcmdapi.Cluster{Server: adminCfg.Host, CertificateAuthorityData: adminCfg.CAData, CertificateAuthority: adminCfg.CAFile}
		kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tok.BootstrapToken()}
		kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
		kc.CurrentContext = "c"
		if err := clientcmd.WriteToFile(*kc, bootstrapKubeconfig); err != nil {
			t.Fatal(err)
		}
		kubeconfig, certDir := filepath.Join(dir, "kubelet.conf"), filepath.Join(dir, "pki")
		if err := kubeletbootstrap.LoadClientCert(ctx, kubeconfig, bootstrapKubeconfig, certDir, "kubeadm-node"); err != nil {
			t.Fatalf("the kubelet's first bootstrap: %v", err)
		}
		if _, ok, err := nodeidentity.Get(ctx, admin, "kubeadm-node"); !ok || err != nil {
			t.Fatalf("no record after the kubelet's first bootstrap: %v, %v", ok, err)
		}
		// A restart with its certificate bootstraps nothing.
		if err := kubeletbootstrap.LoadClientCert(ctx, kubeconfig, bootstrapKubeconfig, certDir, "kubeadm-node"); err != nil {
			t.Fatalf("the kubelet's restart: %v", err)
		}
		if err := os.RemoveAll(certDir); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(kubeconfig); err != nil {
			t.Fatal(err)
		}
		err := kubeletbootstrap.LoadClientCert(ctx, kubeconfig, bootstrapKubeconfig, certDir, "kubeadm-node")
		if err == nil || !strings.Contains(err.Error(), ReasonIdentityMismatch) || !strings.Contains(err.Error(), "edgeplane node forget kubeadm-node") {
			t.Fatalf("the kubelet bootstrapping again with a new key: %v, want denied, saying to forget the node", err)
		}
		t.Logf("the kubelet's second bootstrap: %v", err)
	})
	t.Run("forgetting a node lets another key in", func(t *testing.T) {
		if existed, err := nodeidentity.Forget(ctx, admin, "edge-new"); err != nil || !existed {
			t.Fatalf("forget edge-new: %v, %v", existed, err)
		}
		request(asToken, "new-after-forget", "edge-new", key("new-2"), nil)
		expect(t, "new-after-forget", true, ReasonIdentityBound)
		expectRecord(t, "edge-new", key("new-2"), "token "+tok.ID)

		// A forgotten Node with its Node deleted (what `edgeplane node
		// forget` does): a reinstalled node joins under its name.
		if _, err := nodeidentity.Forget(ctx, admin, old); err != nil {
			t.Fatal(err)
		}
		if err := admin.CoreV1().Nodes().Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		request(asToken, "old-reinstalled", old, key("old-reinstalled"), nil)
		expect(t, "old-reinstalled", true, ReasonIdentityBound)
		expectRecord(t, old, key("old-reinstalled"), "token "+tok.ID)
	})
	t.Run("the node token may not approve", func(t *testing.T) {
		csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "new-other-key", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Self"}}
		if _, err := asToken.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("the node token approving a request: %v, want Forbidden", err)
		}
	})
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == typ {
			return true
		}
	}
	return false
}

// setReady sets node's Ready condition, as its kubelet (Ready) or the node
// lifecycle controller (not Ready) would.
func setReady(t *testing.T, ctx context.Context, client kubernetes.Interface, node string, status corev1.ConditionStatus) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// retiredBinding is the binding earlier versions made: upstream's
// nodeclient auto-approval for every bootstrap token.
func retiredBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: controllers.RetiredAutoApproveBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:bootstrappers"}},
	}
}
