package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The Service every node answers for, from the packaged manifest.
const (
	ServiceNamespace = "kube-system"
	ServiceName      = "edgeplane-ingress"
)

// fieldManager writes the Ingresses' status and the EndpointSlices.
const fieldManager = "edgeplane-ingress"

// managedBy is the EndpointSlices' endpointslice.kubernetes.io/managed-by.
const managedBy = "ingress.edgeplane.io"

// sliceName is the node's EndpointSlice of one family.
func sliceName(node string, v6 bool) string {
	name := ServiceName + "-" + node
	if v6 {
		name += "-v6"
	}
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(name))
		name = name[:253-17] + "-" + hex.EncodeToString(sum[:8])
	}
	return name
}

// publishEndpoints keeps this node's EndpointSlices of the Service: its
// addresses, ready once both ports are bound, owned by the Service (so
// that its deletion, by --disable=ingress, takes them along). Nothing is
// written when they are as wanted; nothing before the Service exists.
func (c *Controller) publishEndpoints(ctx context.Context, svc *corev1.Service, httpPort, httpsPort int32) error {
	if svc == nil {
		return nil
	}
	ready := httpPort != 0 && httpsPort != 0
	slicesLister := c.factory.Discovery().V1().EndpointSlices().Lister().EndpointSlices(ServiceNamespace)
	var errs []error
	for _, v6 := range []bool{false, true} {
		var addrs []string
		for _, ip := range c.o.NodeIPs {
			if (ip.To4() == nil) == v6 {
				addrs = append(addrs, ip.String())
			}
		}
		name := sliceName(c.o.NodeName, v6)
		cur, err := slicesLister.Get(name)
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		if len(addrs) == 0 {
			if cur != nil {
				c.writes.Add(1)
				errs = append(errs, ignoreNotFound(c.client.DiscoveryV1().EndpointSlices(ServiceNamespace).Delete(ctx, name, metav1.DeleteOptions{})))
			}
			continue
		}
		want := wantSlice(svc, name, v6, c.o.NodeName, addrs, ready, httpPort, httpsPort)
		if cur == nil {
			c.writes.Add(1)
			_, err = c.client.DiscoveryV1().EndpointSlices(ServiceNamespace).Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
			if !apierrors.IsAlreadyExists(err) {
				if err != nil {
					errs = append(errs, fmt.Errorf("EndpointSlice %s/%s: %w", ServiceNamespace, name, err))
				}
				continue
			}
			// The cache has not seen the slice yet (this controller's own
			// create a moment ago): compare with the live one instead.
			cur, err = c.client.DiscoveryV1().EndpointSlices(ServiceNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				errs = append(errs, fmt.Errorf("EndpointSlice %s/%s: %w", ServiceNamespace, name, err))
				continue
			}
		}
		err = c.updateSlice(ctx, cur, want)
		if apierrors.IsConflict(err) {
			// The cache is behind this controller's own last write:
			// compare with the live slice instead.
			if cur, err = c.client.DiscoveryV1().EndpointSlices(ServiceNamespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
				err = c.updateSlice(ctx, cur, want)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("EndpointSlice %s/%s: %w", ServiceNamespace, name, err))
		}
	}
	return errors.Join(errs...)
}

// updateSlice brings cur to want; it writes nothing when they are alike.
func (c *Controller) updateSlice(ctx context.Context, cur, want *discoveryv1.EndpointSlice) error {
	if sameSlice(cur, want) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.ManagedFields = nil
	c.writes.Add(1) // the cache holds only their managers: leave them as they are
	upd.Labels, upd.OwnerReferences, upd.AddressType, upd.Endpoints, upd.Ports = want.Labels, want.OwnerReferences, want.AddressType, want.Endpoints, want.Ports
	_, err := c.client.DiscoveryV1().EndpointSlices(ServiceNamespace).Update(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

func wantSlice(svc *corev1.Service, name string, v6 bool, node string, addrs []string, ready bool, httpPort, httpsPort int32) *discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if v6 {
		family = discoveryv1.AddressTypeIPv6
	}
	if httpPort == 0 {
		httpPort = 80
	}
	if httpsPort == 0 {
		httpsPort = 443
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ServiceNamespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: managedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
				BlockOwnerDeletion: ptr.To(false), Controller: ptr.To(true)}},
		},
		AddressType: family,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  addrs,
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			NodeName:   ptr.To(node),
		}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(httpPort)},
			{Name: ptr.To("https"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(httpsPort)},
		},
	}
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return a.AddressType == b.AddressType && a.Labels[discoveryv1.LabelServiceName] == b.Labels[discoveryv1.LabelServiceName] &&
		a.Labels[discoveryv1.LabelManagedBy] == b.Labels[discoveryv1.LabelManagedBy] &&
		len(a.OwnerReferences) == 1 && a.OwnerReferences[0].UID == b.OwnerReferences[0].UID &&
		fmt.Sprint(endpointsString(a.Endpoints), portsString(a.Ports)) == fmt.Sprint(endpointsString(b.Endpoints), portsString(b.Ports))
}

func endpointsString(eps []discoveryv1.Endpoint) string {
	var b strings.Builder
	for _, e := range eps {
		fmt.Fprintf(&b, "%v %v %v %v %s;", e.Addresses, ptr.Deref(e.Conditions.Ready, true), ptr.Deref(e.Conditions.Serving, true),
			ptr.Deref(e.Conditions.Terminating, false), ptr.Deref(e.NodeName, ""))
	}
	return b.String()
}

func portsString(ps []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "%s %s %d;", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0))
	}
	return b.String()
}

// addresses are what an Ingress of ours gets as its status: the Service's
// load balancer addresses (the nodes', from servicelb), else the
// addresses of every server that runs the proxy (its EndpointSlices).
func addresses(o Objects) []networkingv1.IngressLoadBalancerIngress {
	var out []networkingv1.IngressLoadBalancerIngress
	if svc := o.Services[ServiceNamespace+"/"+ServiceName]; svc != nil {
		for _, i := range svc.Status.LoadBalancer.Ingress {
			out = append(out, networkingv1.IngressLoadBalancerIngress{IP: i.IP, Hostname: i.Hostname})
		}
	}
	if len(out) > 0 {
		return out
	}
	var ips []string
	for _, s := range o.Slices[ServiceNamespace+"/"+ServiceName] {
		for _, e := range s.Endpoints {
			ips = append(ips, e.Addresses...)
		}
	}
	slices.Sort(ips)
	for _, ip := range slices.Compact(ips) {
		out = append(out, networkingv1.IngressLoadBalancerIngress{IP: ip})
	}
	return out
}
