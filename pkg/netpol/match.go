package netpol

import (
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The matches rules are made of: addresses, blocks and ports.

// ipBlockMatch is an ipBlock's condition in family f, if the block is of f.
func ipBlockMatch(block *networkingv1.IPBlock, dir string, f family) (string, bool) {
	_, cidr, err := net.ParseCIDR(block.CIDR)
	if err != nil || familyOf(cidr.IP) != f {
		return "", false
	}
	m := fmt.Sprintf("%s %s %s", f, dir, cidr)
	var except []string
	for _, e := range block.Except {
		if _, ex, err := net.ParseCIDR(e); err == nil && familyOf(ex.IP) == f {
			except = append(except, ex.String())
		}
	}
	if len(except) > 0 {
		m += fmt.Sprintf(" %s %s != %s", f, dir, set(except))
	}
	return m, true
}

// set is an anonymous nftables set of the given (non-empty) elements.
func set(elems []string) string {
	elems = slices.Compact(slices.Sorted(slices.Values(elems)))
	if len(elems) == 1 {
		return elems[0]
	}
	return "{ " + strings.Join(elems, ", ") + " }"
}

// protoOf is the nftables name of a port's protocol (TCP when unset).
func protoOf(p networkingv1.NetworkPolicyPort) string {
	if p.Protocol == nil {
		return "tcp"
	}
	return strings.ToLower(string(*p.Protocol))
}

// namedPort resolves a port name on pod p for protocol proto.
func namedPort(p *corev1.Pod, name, proto string) (int32, bool) {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			cproto := strings.ToLower(string(cp.Protocol))
			if cproto == "" {
				cproto = "tcp"
			}
			if cp.Name == name && cproto == proto {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// portMatches are the port conditions of a rule whose destination is the
// pod target: "" matches every port. A named port the target does not
// declare matches nothing.
func portMatches(ports []networkingv1.NetworkPolicyPort, target *corev1.Pod) []string {
	if len(ports) == 0 {
		return []string{""}
	}
	var out []string
	for _, p := range ports {
		proto := protoOf(p)
		switch {
		case p.Port == nil:
			out = append(out, "meta l4proto "+proto)
		case p.Port.Type == intstr.String: // a named port
			if n, ok := namedPort(target, p.Port.StrVal, proto); ok {
				out = append(out, fmt.Sprintf("meta l4proto %s th dport %d", proto, n))
			}
		case p.EndPort != nil && *p.EndPort > p.Port.IntVal:
			out = append(out, fmt.Sprintf("meta l4proto %s th dport %d-%d", proto, p.Port.IntVal, *p.EndPort))
		default:
			out = append(out, fmt.Sprintf("meta l4proto %s th dport %d", proto, p.Port.IntVal))
		}
	}
	return out
}

// inBlock reports whether one of pod's addresses is in block and outside
// its exceptions.
func inBlock(pod *corev1.Pod, block *networkingv1.IPBlock) bool {
	_, cidr, err := net.ParseCIDR(block.CIDR)
	if err != nil {
		return false
	}
	for _, ip := range podIPs(pod) {
		if !cidr.Contains(ip) {
			continue
		}
		excepted := false
		for _, e := range block.Except {
			if _, ex, err := net.ParseCIDR(e); err == nil && ex.Contains(ip) {
				excepted = true
			}
		}
		if !excepted {
			return true
		}
	}
	return false
}

// matchFamily restricts an "any address" rule to family f, so that an
// IPv4 rule in a dual-stack pod's chain does not admit IPv6 traffic.
func matchFamily(addr string, f family) string {
	if addr != "" {
		return addr
	}
	if f == ipv4 {
		return "meta nfproto ipv4"
	}
	return "meta nfproto ipv6"
}

func joinRule(parts ...string) string {
	var nonEmpty []string
	for _, p := range parts {
		if p != "" {
			nonEmpty = append(nonEmpty, p)
		}
	}
	return strings.Join(nonEmpty, " ")
}
