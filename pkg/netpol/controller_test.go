package netpol

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

const testNode = "node-a"

// testPod is a pod of the test: a namespace of the test net and a Pod
// object whose status holds the namespace's address.
type testPod struct {
	name, namespace string
	labels          map[string]string
	ip              string
	node            string         // testNode: plugged into the bridge; else the routed "remote" namespace
	ports           map[string]int // named container ports
}

var testPods = []testPod{
	{name: "web", namespace: "team-a", labels: map[string]string{"app": "web"}, ip: "10.244.0.2", node: testNode, ports: map[string]int{"http-alt": 8080}},
	{name: "client", namespace: "team-a", labels: map[string]string{"app": "client"}, ip: "10.244.0.3", node: testNode},
	{name: "other", namespace: "team-a", labels: map[string]string{"app": "other"}, ip: "10.244.0.4", node: testNode},
	{name: "remote", namespace: "team-b", labels: map[string]string{"app": "client"}, ip: "10.245.0.2", node: "node-b"},
}

// flow is one connection the test tries: from a pod's namespace (or the
// node's, "node") to a pod's port.
type flow struct {
	from, to string
	port     int
}

func (f flow) String() string { return fmt.Sprintf("%s->%s:%d", f.from, f.to, f.port) }

// flows are every connection checked in each case.
var flows = []flow{
	{"client", "web", 80}, {"client", "web", 8080}, {"other", "web", 80}, {"remote", "web", 80},
	{"node", "web", 80}, {"web", "remote", 80}, {"web", "other", 80}, {"client", "other", 80},
}

func port(p int) *intstr.IntOrString { v := intstr.FromInt32(int32(p)); return &v }

func tcp() *corev1.Protocol { return proto(corev1.ProtocolTCP) }

func proto(p corev1.Protocol) *corev1.Protocol { return &p }

func policy(name string, sel map[string]string, types []networkingv1.PolicyType, in []networkingv1.NetworkPolicyIngressRule, out []networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: types, Ingress: in, Egress: out,
		},
	}
}

var (
	ingressOnly = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egressOnly  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	web         = map[string]string{"app": "web"}
)

// TestEnforcement runs the controller with a node's credentials against a
// real API server, on real nftables in a network namespace, and checks real
// TCP connections between pod namespaces for each policy; deleting the
// policy must give back the traffic it took.
func TestEnforcement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server and uses network namespaces")
	}
	tn := newTestNet(t)
	for _, p := range testPods {
		if p.node == testNode {
			tn.addLocalPod(p.name, p.ip)
		}
		tn.serve(p.name, 80)
		for _, port := range p.ports {
			tn.serve(p.name, port)
		}
	}
	nft := tn.nft()

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pki := testapiserver.Start(t, ctx).PKI
	adminCfg, err := clientcmd.BuildConfigFromFlags("", pki.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	nodeCfg := rest.CopyConfig(adminCfg)
	nodeCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + testNode, Groups: []string{NodesGroup, "system:authenticated"}}
	checkNodeAccess(t, ctx, kubernetes.NewForConfigOrDie(nodeCfg), false)
	if err := EnsureRBAC(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if err := EnsureRBAC(ctx, admin); err != nil { // again: a restart
		t.Fatal(err)
	}
	checkNodeAccess(t, ctx, kubernetes.NewForConfigOrDie(nodeCfg), true)
	createPods(t, ctx, admin)

	ctrl, err := New(Options{Client: kubernetes.NewForConfigOrDie(nodeCfg), NodeName: testNode, NFT: nft, MinSyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	allOpen := map[string]bool{}
	for _, f := range flows {
		allOpen[f.String()] = true
	}
	waitFlows(t, tn, "before any policy", allOpen)

	cases := []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		denied   []string // flows the policies must stop; every other one stays open
	}{{
		name:     "deny all ingress",
		policies: []*networkingv1.NetworkPolicy{policy("deny", web, ingressOnly, nil, nil)},
		// The node itself still reaches the pod (kubelet probes), and the
		// pod's own connections out (and their replies) still work.
		denied: []string{"client->web:80", "client->web:8080", "other->web:80", "remote->web:80"},
	}, {
		name: "allow from labelled pods of the namespace",
		policies: []*networkingv1.NetworkPolicy{policy("from-clients", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
		}}, nil)},
		denied: []string{"other->web:80", "remote->web:80"},
	}, {
		name: "namespaceSelector",
		policies: []*networkingv1.NetworkPolicy{policy("from-team-b", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}},
		}}, nil)},
		denied: []string{"client->web:80", "client->web:8080", "other->web:80"},
	}, {
		name: "namespaceSelector and podSelector together",
		policies: []*networkingv1.NetworkPolicy{policy("clients-of-team-a", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
			}},
		}}, nil)},
		denied: []string{"other->web:80", "remote->web:80"},
	}, {
		name: "ipBlock with except",
		policies: []*networkingv1.NetworkPolicy{policy("block", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.244.0.0/16", Except: []string{"10.244.0.4/32"}}}},
		}}, nil)},
		denied: []string{"other->web:80", "remote->web:80"},
	}, {
		name: "numbered port",
		policies: []*networkingv1.NetworkPolicy{policy("port-80", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: tcp(), Port: port(80)}},
		}}, nil)},
		denied: []string{"client->web:8080"},
	}, {
		name: "named port resolved on the pod",
		policies: []*networkingv1.NetworkPolicy{policy("named", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Port: &intstr.IntOrString{Type: intstr.String, StrVal: "http-alt"}}},
		}}, nil)},
		denied: []string{"client->web:80", "other->web:80", "remote->web:80"},
	}, {
		name: "port range",
		policies: []*networkingv1.NetworkPolicy{policy("range", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Port: port(8000), EndPort: func() *int32 { v := int32(8100); return &v }()}},
		}}, nil)},
		denied: []string{"client->web:80", "other->web:80", "remote->web:80"},
	}, {
		// nft takes the UDP and SCTP rules (the table is written) and they
		// do not let TCP through.
		name: "UDP and SCTP ports only",
		policies: []*networkingv1.NetworkPolicy{policy("udp-sctp", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: proto(corev1.ProtocolUDP), Port: port(80)}, {Protocol: proto(corev1.ProtocolSCTP), Port: port(8080)}},
		}}, nil)},
		denied: []string{"client->web:80", "client->web:8080", "other->web:80", "remote->web:80"},
	}, {
		name:     "deny all egress",
		policies: []*networkingv1.NetworkPolicy{policy("no-egress", web, egressOnly, nil, nil)},
		// Connections to the pod still work: their replies are established.
		denied: []string{"web->remote:80", "web->other:80"},
	}, {
		name: "egress to another namespace only",
		policies: []*networkingv1.NetworkPolicy{policy("egress-team-b", web, egressOnly, nil, []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: port(80)}},
		}})},
		denied: []string{"web->other:80"},
	}, {
		name: "two policies add up",
		policies: []*networkingv1.NetworkPolicy{
			policy("from-clients", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: port(80)}},
			}}, nil),
			policy("from-other", web, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "other"}}}},
			}}, nil),
		},
		denied: []string{"client->web:8080", "remote->web:80"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]bool{}
			for _, f := range flows {
				want[f.String()] = true
			}
			for _, d := range tc.denied {
				if _, ok := want[d]; !ok {
					t.Fatalf("denied flow %s is not one of the flows checked", d)
				}
				want[d] = false
			}
			for _, np := range tc.policies {
				if _, err := admin.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitFlows(t, tn, "with the policies", want)
			for _, np := range tc.policies {
				if err := admin.NetworkingV1().NetworkPolicies(np.Namespace).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitFlows(t, tn, "after deleting the policies", allOpen)
		})
	}
	t.Run("bridged traffic is filtered only with bridge-nf-call-iptables", func(t *testing.T) {
		np := policy("deny", web, ingressOnly, nil, nil)
		if _, err := admin.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		denied := map[string]bool{}
		for _, f := range flows {
			denied[f.String()] = true
		}
		for _, d := range []string{"client->web:80", "client->web:8080", "other->web:80", "remote->web:80"} {
			denied[d] = false
		}
		waitFlows(t, tn, "deny all", denied)
		setBridgeNF(t, tn, "0")
		// Same-bridge traffic now skips the inet hooks; routed traffic
		// (from the other "node") is still dropped.
		bridgedOpen := maps.Clone(denied)
		bridgedOpen["client->web:80"], bridgedOpen["client->web:8080"], bridgedOpen["other->web:80"] = true, true, true
		waitFlows(t, tn, "bridge-nf-call-iptables=0", bridgedOpen)
		setBridgeNF(t, tn, "1")
		waitFlows(t, tn, "bridge-nf-call-iptables=1", denied)
		if err := admin.NetworkingV1().NetworkPolicies(np.Namespace).Delete(ctx, np.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFlows(t, tn, "after deleting the policy", allOpen)
	})

	t.Run("nothing is rewritten when nothing changed; a removed table comes back", func(t *testing.T) {
		before := tn.listTableHandles()
		// A change no policy cares about, and resyncs.
		p, err := admin.CoreV1().Pods("team-b").Get(ctx, "remote", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{"touched": "yes"}
		updated, err := admin.CoreV1().Pods("team-b").Update(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		writes := ctrl.writes.Load()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			cached, err := ctrl.pods.Pods("team-b").Get("remote")
			return err == nil && cached.ResourceVersion == updated.ResourceVersion, nil
		}); err != nil {
			t.Fatalf("the controller never saw the update: %v", err)
		}
		for range 3 { // and resyncs
			syncs := ctrl.syncs.Load()
			ctrl.queue.Add(syncKey)
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return ctrl.syncs.Load() > syncs, nil
			}); err != nil {
				t.Fatalf("no sync: %v", err)
			}
		}
		if ctrl.writes.Load() != writes {
			t.Errorf("%d table writes though nothing changed", ctrl.writes.Load()-writes)
		}
		if after := tn.listTableHandles(); after != before {
			t.Fatalf("table rewritten though nothing changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if out, err := exec.Command("nsenter", "--net=/run/netns/"+tn.node, "--", "nft", "delete", "table", "inet", TableName).CombinedOutput(); err != nil {
			t.Fatalf("nft delete table: %v: %s", err, out)
		}
		ctrl.queue.Add(syncKey) // what the periodic resync does
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return !strings.Contains(tn.listTable(), "nft list table"), nil
		}); err != nil {
			t.Fatalf("the removed table was not written again: %v", err)
		}
	})
}

// setBridgeNF sets bridge-nf-call-iptables in the node's namespace.
func setBridgeNF(t *testing.T, tn *testNet, v string) {
	t.Helper()
	if err := inNetns(tn.node, func() error {
		return os.WriteFile(bridgeSysctls[0], []byte(v+"\n"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
}

// createPods creates the namespaces and the Pod objects with their
// addresses in status, as the kubelet would report them.
func createPods(t *testing.T, ctx context.Context, admin kubernetes.Interface) {
	t.Helper()
	for _, ns := range []struct{ name, team string }{{"team-a", "a"}, {"team-b", "b"}} {
		_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: map[string]string{"team": ns.team}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// No controller-manager here to make the default service account
		// that admission wants.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.name}}
		if _, err := admin.CoreV1().ServiceAccounts(ns.name).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range testPods {
		c := corev1.Container{Name: "main", Image: "busybox"}
		for name, port := range p.ports {
			c.Ports = append(c.Ports, corev1.ContainerPort{Name: name, ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Labels: p.labels},
			Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{c}},
		}
		created, err := admin.CoreV1().Pods(p.namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Phase = corev1.PodRunning
		created.Status.PodIP = p.ip
		created.Status.PodIPs = []corev1.PodIP{{IP: p.ip}}
		if _, err := admin.CoreV1().Pods(p.namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFlows tries every flow until each one is open or closed as want says
// (the controller applies changes within a second or so), for at most 20 s.
func waitFlows(t *testing.T, tn *testNet, what string, want map[string]bool) {
	t.Helper()
	ips := map[string]string{}
	for _, p := range testPods {
		ips[p.name] = p.ip
	}
	var last []string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		var (
			mu    sync.Mutex
			wrong []string
			wg    sync.WaitGroup
		)
		for _, f := range flows {
			wg.Go(func() {
				ns := tn.node
				if f.from != "node" {
					ns = tn.ns(f.from)
				}
				open, err := reach(ns, fmt.Sprintf("%s:%d", ips[f.to], f.port), f.to)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					wrong = append(wrong, fmt.Sprintf("%s: %v", f, err))
				case open != want[f.String()]:
					wrong = append(wrong, fmt.Sprintf("%s open=%v, want %v", f, open, want[f.String()]))
				}
			})
		}
		wg.Wait()
		last = wrong
		return len(wrong) == 0, nil
	})
	if err != nil {
		t.Fatalf("%s: flows not as wanted after 20 s:\n  %s\ntable:\n%s", what, strings.Join(last, "\n  "), tn.listTable())
	}
}

// checkNodeAccess checks whether a node may list what the controller
// watches, cluster-wide: the Node authorizer alone does not let it, the
// role EnsureRBAC binds does.
func checkNodeAccess(t *testing.T, ctx context.Context, node kubernetes.Interface, allowed bool) {
	t.Helper()
	lists := map[string]func() error{
		"pods":       func() error { _, err := node.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err },
		"namespaces": func() error { _, err := node.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); return err },
		"networkpolicies": func() error {
			_, err := node.NetworkingV1().NetworkPolicies("").List(ctx, metav1.ListOptions{})
			return err
		},
	}
	for what, list := range lists {
		// RBAC caches roles: a grant may take a moment to show.
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			err = list()
			return (err == nil) == allowed && (allowed || apierrors.IsForbidden(err)), nil
		})
		switch {
		case allowed && err != nil:
			t.Errorf("with the role, a node lists %s: %v", what, err)
		case !allowed && !apierrors.IsForbidden(err):
			t.Errorf("without the role, a node listing %s: got %v, want Forbidden", what, err)
		}
	}
}
