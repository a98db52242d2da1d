package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// writeStatus gives every Ingress of ours the addresses it is served at,
// and clears the status this controller wrote on Ingresses that are no
// longer ours (their class changed). Only what differs is written: an idle
// cluster costs no writes.
func (c *Controller) writeStatus(ctx context.Context, o Objects, ours []*networkingv1.Ingress) error {
	want := addresses(o)
	isOurs := map[types.UID]bool{}
	var errs []error
	for _, ing := range ours {
		isOurs[ing.UID] = true
		if sameLB(ing.Status.LoadBalancer.Ingress, want) {
			continue
		}
		errs = append(errs, c.patchStatus(ctx, ing, want))
	}
	for _, ing := range o.Ingresses {
		if !isOurs[ing.UID] && len(ing.Status.LoadBalancer.Ingress) > 0 && statusWrittenByUs(ing) {
			errs = append(errs, c.patchStatus(ctx, ing, nil))
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) patchStatus(ctx context.Context, ing *networkingv1.Ingress, lb []networkingv1.IngressLoadBalancerIngress) error {
	c.writes.Add(1)
	err := patchLB(ctx, c.client.NetworkingV1().Ingresses(ing.Namespace), ing.Name, lb)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status of Ingress %s/%s: %w", ing.Namespace, ing.Name, err)
	}
	klog.FromContext(ctx).V(1).Info("Set the Ingress's addresses", "ingress", klog.KObj(ing), "addresses", lbString(lb))
	return nil
}

type statusPatcher interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*networkingv1.Ingress, error)
}

// patchLB sets (nil: removes) status.loadBalancer.ingress with a merge
// patch of the status alone.
func patchLB(ctx context.Context, c statusPatcher, name string, lb []networkingv1.IngressLoadBalancerIngress) error {
	var v any
	if len(lb) > 0 {
		v = lb
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": v}}})
	if err != nil {
		return err
	}
	_, err = c.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	return err
}

// statusWrittenByUs tells whether this controller's field manager owns
// fields of the Ingress's status.
func statusWrittenByUs(ing *networkingv1.Ingress) bool {
	for _, m := range ing.ManagedFields {
		if m.Manager == fieldManager && m.Subresource == "status" {
			return true
		}
	}
	return false
}

func sameLB(a, b []networkingv1.IngressLoadBalancerIngress) bool {
	return lbString(a) == lbString(b)
}

func lbString(lb []networkingv1.IngressLoadBalancerIngress) string {
	var parts []string
	for _, i := range lb {
		parts = append(parts, i.IP+i.Hostname)
	}
	return strings.Join(parts, ",")
}

// reportProblems logs, and records as a Warning Event on the Ingress, what
// of an Ingress cannot be served (a missing Service or port, a bad TLS
// Secret), once per change.
func (c *Controller) reportProblems(ctx context.Context, problems map[string][]string, ours []*networkingv1.Ingress) {
	logger := klog.FromContext(ctx)
	c.reportedMu.Lock()
	defer c.reportedMu.Unlock()
	if c.reported == nil {
		c.reported = map[string]string{}
	}
	byKey := map[string]*networkingv1.Ingress{}
	for _, ing := range ours {
		byKey[ing.Namespace+"/"+ing.Name] = ing
	}
	for key := range c.reported {
		if _, ok := problems[key]; !ok {
			delete(c.reported, key)
		}
	}
	for key, ps := range problems {
		msg := strings.Join(ps, "; ")
		if c.reported[key] == msg {
			continue
		}
		c.reported[key] = msg
		logger.Info("Ingress: part of an Ingress cannot be served", "ingress", key, "problems", msg)
		ing := byKey[key]
		if ing == nil {
			continue
		}
		now := metav1.NewTime(time.Now())
		ev := &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{GenerateName: ing.Name + ".", Namespace: ing.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Ingress", APIVersion: "networking.k8s.io/v1", Namespace: ing.Namespace,
				Name: ing.Name, UID: ing.UID, ResourceVersion: ing.ResourceVersion},
			Reason: "BadConfig", Message: msg, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: fieldManager, Host: c.o.NodeName},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: ControllerName, ReportingInstance: c.o.NodeName,
		}
		c.writes.Add(1)
		if _, err := c.client.CoreV1().Events(ing.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			logger.V(1).Info("Ingress: recording an Event", "ingress", key, "err", err.Error())
		}
	}
}

// lastApplied is kubectl's copy of the applied object: not needed here.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripObject is the informers' transform: it keeps what the controller
// reads and drops the rest (managed fields but their manager, kubectl's
// last-applied copy, Secret data other than the key pair), to keep the
// caches small.
func stripObject(obj any) (any, error) {
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return obj, nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	if mf := m.GetManagedFields(); len(mf) > 0 {
		kept := make([]metav1.ManagedFieldsEntry, len(mf))
		for i, e := range mf {
			kept[i] = metav1.ManagedFieldsEntry{Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource}
		}
		m.SetManagedFields(kept)
	}
	if a := m.GetAnnotations(); a[lastApplied] != "" {
		b := make(map[string]string, len(a))
		for k, v := range a {
			if k != lastApplied {
				b[k] = v
			}
		}
		m.SetAnnotations(b)
	}
	if s, ok := obj.(*corev1.Secret); ok {
		s.Data = map[string][]byte{"tls.crt": s.Data["tls.crt"], "tls.key": s.Data["tls.key"]}
	}
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		for i := range s.Endpoints {
			s.Endpoints[i].Hints, s.Endpoints[i].DeprecatedTopology = nil, nil
		}
	}
	return obj, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
