package netpol

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func rulePod(ns, name, node string, lbls map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func withPort(p *corev1.Pod, name string, proto corev1.Protocol, n int32) *corev1.Pod {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: name, Protocol: proto, ContainerPort: n}}})
	return p
}

func chainOf(rs ruleset, name string) []string {
	for _, c := range rs.chains {
		if c.name == name {
			return c.rules
		}
	}
	return nil
}

// TestBuild checks the rules computed for cases the connection test does
// not cover (the kernel is not involved here: TestEnforcement checks that
// such rules filter real traffic).
func TestBuild(t *testing.T) {
	sel := map[string]string{"app": "web"}
	denyAll := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "deny"},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: ingressOnly},
	}
	hostNet := rulePod("a", "host", "n1", sel, "192.0.2.1")
	hostNet.Spec.HostNetwork = true
	done := rulePod("a", "done", "n1", sel, "10.0.0.9")
	done.Status.Phase = corev1.PodSucceeded
	dnsName := intstr.FromString("dns")
	udp := corev1.ProtocolUDP

	cases := []struct {
		name     string
		pods     []*corev1.Pod
		policies []*networkingv1.NetworkPolicy
		chain    string
		want     []string // the chain's rules; nil: no such chain
	}{{
		name:     "a hostNetwork pod is not enforced",
		pods:     []*corev1.Pod{hostNet},
		policies: []*networkingv1.NetworkPolicy{denyAll},
		chain:    "ingress_a_host",
	}, {
		name:     "a finished pod is not enforced",
		pods:     []*corev1.Pod{done},
		policies: []*networkingv1.NetworkPolicy{denyAll},
		chain:    "ingress_a_done",
	}, {
		name:     "a pod of another node is not enforced here",
		pods:     []*corev1.Pod{rulePod("a", "web", "n2", sel, "10.0.1.2")},
		policies: []*networkingv1.NetworkPolicy{denyAll},
		chain:    "ingress_a_web",
	}, {
		name:     "dual stack: both families jump to the chain",
		pods:     []*corev1.Pod{rulePod("a", "web", "n1", sel, "10.0.0.2", "fd00::2")},
		policies: []*networkingv1.NetworkPolicy{denyAll},
		chain:    chainIngress,
		want:     []string{"ip daddr 10.0.0.2 jump ingress_a_web", "ip6 daddr fd00::2 jump ingress_a_web"},
	}, {
		name: "an empty rule allows every source of the pod's families",
		pods: []*corev1.Pod{rulePod("a", "web", "n1", sel, "10.0.0.2", "fd00::2")},
		policies: []*networkingv1.NetworkPolicy{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "all"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: ingressOnly,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{}}},
		}},
		chain: "ingress_a_web",
		want:  []string{"meta nfproto ipv4 return", "meta nfproto ipv6 return", "drop"},
	}, {
		name: "a peer selector that matches no pod allows nothing; an IPv6 block has no IPv4 rule",
		pods: []*corev1.Pod{rulePod("a", "web", "n1", sel, "10.0.0.2")},
		policies: []*networkingv1.NetworkPolicy{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "none"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: ingressOnly,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nobody"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/64"}},
				}}}},
		}},
		chain: "ingress_a_web",
		want:  []string{"drop"},
	}, {
		name: "an egress named port is resolved on each destination pod",
		pods: []*corev1.Pod{
			rulePod("a", "web", "n1", sel, "10.0.0.2"),
			withPort(rulePod("a", "dns1", "n1", map[string]string{"app": "dns"}, "10.0.0.3"), "dns", udp, 53),
			withPort(rulePod("a", "dns2", "n2", map[string]string{"app": "dns"}, "10.0.1.3"), "dns", udp, 5353),
			withPort(rulePod("a", "tcpdns", "n2", map[string]string{"app": "dns"}, "10.0.1.4"), "dns", corev1.ProtocolTCP, 53),
		},
		policies: []*networkingv1.NetworkPolicy{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "dns"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: egressOnly,
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dns"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dnsName}},
				}}},
		}},
		chain: "egress_a_web",
		want: []string{
			"ip daddr 10.0.0.3 meta l4proto udp th dport 53 return",
			"ip daddr 10.0.1.3 meta l4proto udp th dport 5353 return",
			"drop",
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := build(snapshot{node: "n1", pods: tc.pods, policies: tc.policies, namespaces: map[string]labels.Set{"a": {}}})
			got := chainOf(rs, tc.chain)
			if !slices.Equal(got, tc.want) {
				t.Errorf("chain %s:\n got %q\nwant %q", tc.chain, got, tc.want)
			}
		})
	}
}

// TestBuildStable: the same objects in another order give the same table,
// so an unchanged cluster never rewrites it.
func TestBuildStable(t *testing.T) {
	pods := []*corev1.Pod{
		rulePod("a", "web", "n1", map[string]string{"app": "web"}, "10.0.0.2"),
		rulePod("a", "c1", "n1", map[string]string{"app": "c"}, "10.0.0.3"),
		rulePod("b", "c2", "n2", map[string]string{"app": "c"}, "10.0.1.3"),
	}
	peer := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "c"}}}
	policies := []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1"}, Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{peer}}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p2"}, Spec: networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly}},
	}
	ns := map[string]labels.Set{"a": {}, "b": {}}
	first := build(snapshot{node: "n1", pods: pods, policies: policies, namespaces: ns})
	slices.Reverse(pods)
	slices.Reverse(policies)
	second := build(snapshot{node: "n1", pods: pods, policies: policies, namespaces: ns})
	if first.fingerprint() != second.fingerprint() {
		t.Fatalf("order changed the table")
	}
	if got := chainOf(first, "ingress_a_web"); !slices.Equal(got, []string{"ip saddr { 10.0.0.3, 10.0.1.3 } return", "drop"}) {
		t.Errorf("ingress_a_web = %q", got)
	}
	if first.selected != 2 {
		t.Errorf("selected = %d, want 2 (web and c1: the pods of a on n1)", first.selected)
	}
}

// TestPodChainName: names stay unique and within the kernel's limit.
func TestPodChainName(t *testing.T) {
	long := strings.Repeat("x", 253)
	a := podChainName("ingress", rulePod("ns", long, "n", nil))
	b := podChainName("ingress", rulePod("ns", long[:252]+"y", "n", nil))
	if len(a) > maxChainName || len(b) > maxChainName {
		t.Fatalf("lengths %d, %d over %d", len(a), len(b), maxChainName)
	}
	if a == b {
		t.Fatalf("two pods, one chain name %s", a)
	}
	if got := podChainName("egress", rulePod("ns", "web-1", "n", nil)); got != "egress_ns_web-1" {
		t.Errorf("short name = %s", got)
	}
}
