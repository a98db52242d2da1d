package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// TestLiteNodes: five lite nodes in two processes join a real server through
// the node token and TLS bootstrap, each with a client certificate of its
// own, get Ready, run one pod each, renew Leases they hold as themselves,
// are refused what the Node authorizer refuses another node, serve a short
// LIST burst (-list-burst) as its ordinary user, and a killed
// one stops renewing its Lease while the others go on. (That a node whose
// renewals stop goes NotReady is TestHollowNodes' check of the server.)
func TestLiteNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and five lite nodes")
	}
	const n = 5
	dataDir, cs := startEdgeplane(t)
	tok, ok, err := nodetoken.ReadFile(dataDir)
	if err != nil || !ok {
		t.Fatalf("node token in %s: ok=%v err=%v", dataDir, ok, err)
	}
	kc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := newLiteFleet(exe, t.TempDir(), kc.Host, tok.String(), "lite", 3)
	t.Cleanup(func() {
		if err := f.stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("lite nodes:\n%s\n%s", f.logTail(0), f.logTail(n-1))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if err := f.startAll(n, 0); err != nil {
		t.Fatal(err)
	}
	if got := len(f.pids()); got != 2 {
		t.Errorf("%d processes for %d nodes of at most 3 each, want 2", got, n)
	}
	dead := func() error {
		for i := range n {
			if !f.alive(i) {
				return fmt.Errorf("lite node %s stopped:\n%s", f.name(i), f.logTail(i))
			}
		}
		return nil
	}
	if err := waitNodesReady(ctx, cs, "lite", n, 2*time.Minute, dead); err != nil {
		t.Fatal(err)
	}
	checkNodeCertificates(ctx, t, cs, tok.ID, f, n)

	d := deployment("spread", n)
	d.Spec.Template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: d.Spec.Selector,
	}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, counts, err := waitRunning(ctx, cs, "default", "spread", n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := counts.perNode[f.name(i)]; got != 1 {
			t.Errorf("node %s runs %d of the pods, want 1 (per node: %v)", f.name(i), got, counts.perNode)
		}
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: workloadLabel + "=spread"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.Status.HostIP == "" || len(p.Status.ContainerStatuses) != 1 || !p.Status.ContainerStatuses[0].Ready {
			t.Errorf("pod %s on %s: podIP %q hostIP %q containers %+v, want addresses and a ready container",
				p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.HostIP, p.Status.ContainerStatuses)
		}
	}

	checkListBurst(ctx, t, kc, cs, n)

	// Each Lease is held, and owned, by its node.
	for i := range n {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.name(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != f.name(i) || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != liteLeaseSeconds {
			t.Errorf("lease %s: holder %q duration %v, want %s and %d", l.Name, h, l.Spec.LeaseDurationSeconds, f.name(i), liteLeaseSeconds)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].Name != f.name(i) {
			t.Errorf("lease %s: owners %+v, want its Node", l.Name, l.OwnerReferences)
		}
	}

	var pod0 *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == f.name(0) {
			pod0 = &pods.Items[i]
		}
	}
	if pod0 == nil {
		t.Fatalf("no pod on %s", f.name(0))
	}
	checkNodeIsolation(ctx, t, kc.Host, tok, f.name(0), pod0)

	// A killed node stops renewing; the others renew within a period.
	victim := n - 1
	before, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.name(victim), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.kill(victim); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if f.alive(victim) {
		t.Errorf("node %s alive after its kill", f.name(victim))
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*liteRenewInterval+5*time.Second, true, func(ctx context.Context) (bool, error) {
		for i := range victim {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.name(i), metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(killed.Add(time.Second)) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the live nodes did not renew their Leases after the kill: %v", err)
	}
	after, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, f.name(victim), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion && after.Spec.RenewTime.After(killed) {
		t.Errorf("killed node %s renewed its Lease at %s, after its kill at %s", f.name(victim), after.Spec.RenewTime, killed)
	}

	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	var samples int
	for _, file := range f.latencyFiles() {
		d, err := readLeaseLatencies(file, time.Time{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		samples += len(d.ok)
	}
	if samples < n-1 {
		t.Errorf("%d lease latency samples, want at least one per live node (%d)", samples, n-1)
	}
}

// checkNodeCertificates: each node's client certificate came from a CSR of
// the bootstrap token for system:node:<its name>, issued by the kubelet
// client signer.
func checkNodeCertificates(ctx context.Context, t *testing.T, cs kubernetes.Interface, tokenID string, f *liteFleet, n int) {
	t.Helper()
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	issued := map[string]bool{}
	for _, c := range csrs.Items {
		if c.Spec.Username != "system:bootstrap:"+tokenID || c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		if b, _ := pem.Decode(c.Status.Certificate); b != nil {
			if cert, err := x509.ParseCertificate(b.Bytes); err == nil {
				issued[cert.Subject.CommonName] = true
			}
		}
	}
	for i := range n {
		if !issued["system:node:"+f.name(i)] {
			t.Errorf("no kubelet client certificate issued to system:node:%s through the bootstrap token (issued: %v)", f.name(i), issued)
		}
	}
}

// checkNodeIsolation joins one more lite node in the test's process and has
// it try, as system:node:lite-intruder, what only node other may do (the
// Node authorizer and NodeRestriction refuse it).
func checkNodeIsolation(ctx context.Context, t *testing.T, server string, tok nodetoken.Token, other string, otherPod *corev1.Pod) {
	t.Helper()
	ca, err := discoverCA(ctx, server, tok)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := kubernetes.NewForConfig(bootstrapConfig(server, ca, tok))
	if err != nil {
		t.Fatal(err)
	}
	r := &liteRunner{cfg: liteConfig{Server: server, Prefix: "lite"}, caPEM: ca, boot: boot, lat: &leaseLatency{}}
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	intruder := newLiteNode(nctx, r, 0)
	intruder.name = "lite-intruder"
	defer intruder.kill()
	cert, key, err := intruder.join()
	if err != nil {
		t.Fatal(err)
	}
	if err := intruder.clients(cert, key); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		do   func() error
	}{
		{"patch another node's status", func() error {
			_, err := intruder.hb.core.Nodes().Patch(ctx, other, types.StrategicMergePatchType,
				[]byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"renew another node's Lease", func() error {
			l, err := intruder.hb.coord.Leases(corev1.NamespaceNodeLease).Get(ctx, other, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = intruder.hb.coord.Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
		// (It may read them: pkg/netpol grants every node reads of all pods.)
		{"patch the status of another node's pod", func() error {
			_, err := intruder.core.Pods(otherPod.Namespace).Patch(ctx, otherPod.Name, types.StrategicMergePatchType,
				[]byte(`{"status":{"phase":"Failed"}}`), metav1.PatchOptions{}, "status")
			return err
		}},
	} {
		if err := tc.do(); !apierrors.IsForbidden(err) {
			t.Errorf("lite-intruder may %s (%s)? err = %v, want Forbidden", tc.what, other, err)
		}
	}
	// Its own Node it may create.
	if err := intruder.register(); err != nil {
		t.Errorf("lite-intruder registering itself: %v", err)
	}
}

// checkListBurst runs a short LIST burst (-list-burst) against the server:
// its lists succeed as the bound user, which the view role keeps from
// deleting (so the lists are not the admin's, which APF would exempt).
func checkListBurst(ctx context.Context, t *testing.T, admin *rest.Config, cs kubernetes.Interface, pods int) {
	t.Helper()
	if err := ensureBurstUser(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := ensureBurstUser(ctx, cs); err != nil {
		t.Fatalf("binding the burst user again: %v", err)
	}
	r, err := runListBurst(ctx, admin, 2, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.lists == 0 || r.failed != 0 || len(r.latency) != r.lists || !r.to.After(r.from) {
		t.Errorf("burst: %d lists, %d failed, %d latencies, from %s to %s; want lists and no failure",
			r.lists, r.failed, len(r.latency), r.from, r.to)
	}
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: burstUser, Groups: []string{"system:authenticated"}}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := as.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: workloadLabel + "=spread"})
	if err != nil || len(list.Items) != pods {
		t.Fatalf("pods as %s: %v, err %v; want %d", burstUser, len(list.Items), err, pods)
	}
	err = as.CoreV1().Pods("default").Delete(ctx, list.Items[0].Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("a dry-run delete as %s: %v, want Forbidden (the burst must not run as the admin)", burstUser, err)
	}
}
