package netpol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/knftables"
)

// TableName is the nftables table (family inet) the controller owns. It
// touches no other table.
const TableName = "edgeplane-netpol"

// Chains of the table. forward and input are base chains; a packet they do
// not drop goes on to the other tables' chains at the same hook, so this
// table can only ever take traffic away, never let through what another
// table (kube-proxy's, flannel's, a firewall's) drops.
const (
	chainForward = "forward"
	chainInput   = "input"
	chainIngress = "ingress"
	chainEgress  = "egress"
)

// maxChainName keeps per-pod chain names well under the kernel's 256.
const maxChainName = 200

// snapshot is what the rules are computed from: the informers' contents.
type snapshot struct {
	node       string
	pods       []*corev1.Pod
	namespaces map[string]labels.Set
	policies   []*networkingv1.NetworkPolicy
}

// nftChain is one chain of the table and its rules, in order.
type nftChain struct {
	name  string
	hook  knftables.BaseChainHook // empty: a regular chain
	rules []string
}

// ruleset is the whole table.
type ruleset struct {
	chains []nftChain
	// selected counts the local pods with an ingress or egress chain.
	selected int
}

// family is an nftables address match keyword: ip or ip6.
type family string

const (
	ipv4 family = "ip"
	ipv6 family = "ip6"
)

func familyOf(ip net.IP) family {
	if ip.To4() != nil {
		return ipv4
	}
	return ipv6
}

// podIPs returns the pod's parsed addresses.
func podIPs(p *corev1.Pod) []net.IP {
	var ips []net.IP
	seen := map[string]bool{}
	add := func(s string) {
		if ip := net.ParseIP(s); ip != nil && !seen[ip.String()] {
			seen[ip.String()] = true
			ips = append(ips, ip)
		}
	}
	for _, pip := range p.Status.PodIPs {
		add(pip.IP)
	}
	add(p.Status.PodIP)
	return ips
}

// networked reports whether p has an address of its own on the pod
// network: hostNetwork pods share the node's, finished pods have none left.
func networked(p *corev1.Pod) bool {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	return len(podIPs(p)) > 0
}

// build computes the table from s. Everything is sorted so that the same
// snapshot gives the same rules, and an unchanged cluster no transaction.
func build(s snapshot) ruleset {
	pods := slices.Clone(s.pods)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	policies := slices.Clone(s.policies)
	slices.SortFunc(policies, func(a, b *networkingv1.NetworkPolicy) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var peers []*corev1.Pod
	for _, p := range pods {
		if networked(p) {
			peers = append(peers, p)
		}
	}
	b := builder{snapshot: s, peers: peers}

	rs := ruleset{}
	var ingressJumps, egressJumps []string
	var podChains []nftChain
	for _, p := range peers {
		if p.Spec.NodeName != s.node {
			continue
		}
		var ing, eg []*networkingv1.NetworkPolicy
		for _, np := range policies {
			if np.Namespace != p.Namespace || !b.selects(&np.Spec.PodSelector, p.Labels) {
				continue
			}
			in, out := policyTypes(np)
			if in {
				ing = append(ing, np)
			}
			if out {
				eg = append(eg, np)
			}
		}
		if len(ing) > 0 {
			name := podChainName("ingress", p)
			podChains = append(podChains, nftChain{name: name, rules: b.ingressRules(p, ing)})
			for _, ip := range podIPs(p) {
				ingressJumps = append(ingressJumps, fmt.Sprintf("%s daddr %s jump %s", familyOf(ip), ip, name))
			}
		}
		if len(eg) > 0 {
			name := podChainName("egress", p)
			podChains = append(podChains, nftChain{name: name, rules: b.egressRules(p, eg)})
			for _, ip := range podIPs(p) {
				egressJumps = append(egressJumps, fmt.Sprintf("%s saddr %s jump %s", familyOf(ip), ip, name))
			}
		}
		if len(ing) > 0 || len(eg) > 0 {
			rs.selected++
		}
	}
	// Replies of allowed connections pass; new connections from a local
	// pod are checked against its egress policies, then (forwarded ones)
	// against the destination's ingress policies. Traffic the node itself
	// sends to its pods (kubelet probes) is locally generated: it never
	// reaches forward or input, so it is allowed, as upstream
	// implementations allow it.
	rs.chains = append(rs.chains,
		nftChain{name: chainForward, hook: knftables.ForwardHook, rules: []string{
			"ct state established,related accept",
			"jump " + chainEgress,
			"jump " + chainIngress,
		}},
		nftChain{name: chainInput, hook: knftables.InputHook, rules: []string{
			"ct state established,related accept",
			"jump " + chainEgress,
		}},
		nftChain{name: chainIngress, rules: ingressJumps},
		nftChain{name: chainEgress, rules: egressJumps},
	)
	rs.chains = append(rs.chains, podChains...)
	return rs
}

// policyTypes says which directions np governs, defaulted as the API
// server defaults them for objects written before policyTypes existed.
func policyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

// podChainName is a per-pod chain's name: namespace and pod names hold no
// underscore, so the name is unique; a long one is shortened with a hash.
func podChainName(dir string, p *corev1.Pod) string {
	name := dir + "_" + p.Namespace + "_" + p.Name
	if len(name) <= maxChainName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxChainName-17] + "_" + hex.EncodeToString(sum[:8])
}

// builder turns policy rules into nftables rules.
type builder struct {
	snapshot
	peers []*corev1.Pod // every networked pod of the cluster, sorted
}

// selects matches a label selector; an invalid one selects nothing (the API
// server validates selectors, so this is only defensive).
func (b *builder) selects(sel *metav1.LabelSelector, set labels.Set) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(set)
}

// peerPods are the pods a NetworkPolicyPeer with a pod or namespace
// selector matches, for a policy in namespace ns.
func (b *builder) peerPods(ns string, peer networkingv1.NetworkPolicyPeer) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range b.peers {
		if peer.NamespaceSelector == nil {
			if p.Namespace != ns {
				continue
			}
		} else if !b.selects(peer.NamespaceSelector, b.namespaces[p.Namespace]) {
			continue
		}
		if peer.PodSelector != nil && !b.selects(peer.PodSelector, p.Labels) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// addrMatches are the address conditions of one peer list in family f:
// "" matches every address.
func (b *builder) addrMatches(ns string, peers []networkingv1.NetworkPolicyPeer, dir string, f family) []string {
	if len(peers) == 0 {
		return []string{""}
	}
	var out []string
	for _, peer := range peers {
		if peer.IPBlock != nil {
			if m, ok := ipBlockMatch(peer.IPBlock, dir, f); ok {
				out = append(out, m)
			}
			continue
		}
		var addrs []string
		for _, p := range b.peerPods(ns, peer) {
			for _, ip := range podIPs(p) {
				if familyOf(ip) == f {
					addrs = append(addrs, ip.String())
				}
			}
		}
		if len(addrs) > 0 {
			out = append(out, fmt.Sprintf("%s %s %s", f, dir, set(addrs)))
		}
	}
	return out
}

// ingressRules is the chain of a local pod selected by ingress policies:
// a connection any rule of any of them allows returns, the rest is dropped.
func (b *builder) ingressRules(target *corev1.Pod, policies []*networkingv1.NetworkPolicy) []string {
	var out []string
	for _, f := range podFamilies(target) {
		for _, np := range policies {
			for _, r := range np.Spec.Ingress {
				for _, addr := range b.addrMatches(np.Namespace, r.From, "saddr", f) {
					for _, port := range portMatches(r.Ports, target) {
						out = append(out, joinRule(matchFamily(addr, f), port, "return"))
					}
				}
			}
		}
	}
	return append(slices.Compact(out), "drop")
}

// egressRules is the chain of a local pod selected by egress policies.
// Named ports are resolved on the destination pods, so a rule with one
// matches the destinations that declare it, address and port together.
func (b *builder) egressRules(src *corev1.Pod, policies []*networkingv1.NetworkPolicy) []string {
	var out []string
	for _, f := range podFamilies(src) {
		for _, np := range policies {
			for _, r := range np.Spec.Egress {
				var plain []networkingv1.NetworkPolicyPort
				for _, p := range r.Ports {
					if p.Port != nil && p.Port.Type == intstr.String {
						out = append(out, b.namedEgress(np.Namespace, r.To, p, f)...)
						continue
					}
					plain = append(plain, p)
				}
				if len(r.Ports) > 0 && len(plain) == 0 {
					continue
				}
				for _, addr := range b.addrMatches(np.Namespace, r.To, "daddr", f) {
					for _, port := range portMatches(plain, nil) {
						out = append(out, joinRule(matchFamily(addr, f), port, "return"))
					}
				}
			}
		}
	}
	return append(slices.Compact(out), "drop")
}

// namedEgress allows the named port p on each destination pod that the
// peers cover (by selector, or by address for ipBlock and empty peers) and
// declares the port.
func (b *builder) namedEgress(ns string, to []networkingv1.NetworkPolicyPeer, p networkingv1.NetworkPolicyPort, f family) []string {
	proto := protoOf(p)
	var candidates []*corev1.Pod
	if len(to) == 0 {
		candidates = b.peers
	}
	for _, peer := range to {
		if peer.IPBlock == nil {
			candidates = append(candidates, b.peerPods(ns, peer)...)
			continue
		}
		for _, pod := range b.peers {
			if inBlock(pod, peer.IPBlock) {
				candidates = append(candidates, pod)
			}
		}
	}
	var out []string
	for _, pod := range candidates {
		n, ok := namedPort(pod, p.Port.StrVal, proto)
		if !ok {
			continue
		}
		for _, ip := range podIPs(pod) {
			if familyOf(ip) == f {
				out = append(out, joinRule(fmt.Sprintf("%s daddr %s", f, ip), fmt.Sprintf("meta l4proto %s th dport %d", proto, n), "return"))
			}
		}
	}
	slices.Sort(out)
	return out
}

// podFamilies are the address families of the pod's addresses.
func podFamilies(p *corev1.Pod) []family {
	var fs []family
	for _, ip := range podIPs(p) {
		if f := familyOf(ip); !slices.Contains(fs, f) {
			fs = append(fs, f)
		}
	}
	return fs
}

// fingerprint identifies a ruleset: equal fingerprints, equal tables.
func (rs ruleset) fingerprint() string {
	h := sha256.New()
	for _, c := range rs.chains {
		fmt.Fprintf(h, "chain %s %s %d\n", c.name, c.hook, len(c.rules))
		for _, r := range c.rules {
			h.Write([]byte(r + "\n"))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// transaction replaces the whole table with rs in one atomic transaction:
// the table is created (if missing), deleted and written again, so no
// packet ever sees a half-written table and no stale chain survives.
func (rs ruleset) transaction(tx *knftables.Transaction) {
	comment := "NetworkPolicy of this node's pods, written by edgeplane"
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: &comment})
	for _, c := range rs.chains {
		ch := &knftables.Chain{Name: c.name}
		if c.hook != "" {
			ch.Type = knftables.PtrTo(knftables.FilterType)
			ch.Hook = knftables.PtrTo(c.hook)
			ch.Priority = knftables.PtrTo(knftables.FilterPriority)
		}
		tx.Add(ch)
	}
	for _, c := range rs.chains {
		for _, r := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.name, Rule: r})
		}
	}
}
