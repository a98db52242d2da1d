package apicache

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/klog/v2"
)

// maxStatusBody bounds a pod status update's body.
const maxStatusBody = 1 << 20

// writeback applies the kubelet's pod status update to the cache while no
// server answers, and answers as the server would: the pod's new status
// (after a restart offline: new sandboxes, new addresses, readiness) reaches
// the node's watches of pods, and every kept EndpointSlice whose endpoint
// is that pod gets its new addresses and readiness, so kube-proxy routes
// the Service to where the pod now is. Only the status is taken from the
// update. When a server answers again, the kubelet's status manager finds
// the server's pod different from its own status and sends it again.
func (c *Cache) writeback(w http.ResponseWriter, r *http.Request, q request) {
	logger := klog.FromContext(r.Context())
	body, err := io.ReadAll(io.LimitReader(r.Body, maxStatusBody+1))
	if err != nil || len(body) > maxStatusBody {
		badRequest(w, "a pod status update's body could not be read or is too large")
		return
	}
	raw, ok := c.store.get(q.object)
	if !ok {
		unavailable(w, "no API server answers and the node's cache does not hold this pod")
		return
	}
	updated, err := applyStatus(raw, r.Method, r.Header.Get("Content-Type"), body)
	if err != nil {
		unavailable(w, "no API server answers and the node's cache cannot apply this update: "+err.Error())
		return
	}
	var pod corev1.Pod
	if err := json.Unmarshal(updated, &pod); err != nil {
		unavailable(w, "no API server answers and the updated pod does not decode: "+err.Error())
		return
	}
	out := c.keepLocal(logger, q.object, updated)
	c.rewriteSlices(logger, &pod)
	logger.V(2).Info("Pod status applied to the node's cache", "pod", pod.Namespace+"/"+pod.Name, "podIPs", pod.Status.PodIPs)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// applyStatus is pod raw with the status of the update (a patch of one of
// the API's three kinds, or a whole pod).
func applyStatus(raw []byte, method, contentType string, body []byte) ([]byte, error) {
	var patched []byte
	var err error
	ct := strings.TrimSpace(strings.Split(contentType, ";")[0])
	switch {
	case method == http.MethodPatch && ct == "application/strategic-merge-patch+json":
		patched, err = strategicpatch.StrategicMergePatch(raw, body, &corev1.Pod{})
	case method == http.MethodPatch && ct == "application/merge-patch+json":
		patched, err = jsonpatch.MergePatch(raw, body)
	case method == http.MethodPatch && ct == "application/json-patch+json":
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(body); err == nil {
			patched, err = p.Apply(raw)
		}
	case method == http.MethodPut && ct == "application/json":
		patched = body
	default:
		return nil, fmt.Errorf("an update of content type %q", contentType)
	}
	if err != nil {
		return nil, err
	}
	var from, into map[string]json.RawMessage
	if err := json.Unmarshal(patched, &from); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &into); err != nil {
		return nil, err
	}
	into["status"] = from["status"]
	return json.Marshal(into)
}

// keepLocal stores an object the cache changed itself, with a
// resourceVersion of its own, in every list that holds it, and sends it to
// the watches held on those lists. It returns the object as kept.
func (c *Cache) keepLocal(logger klog.Logger, key string, raw []byte) []byte {
	var top map[string]json.RawMessage
	_ = json.Unmarshal(raw, &top)
	var md map[string]json.RawMessage
	_ = json.Unmarshal(top["metadata"], &md)
	if md == nil {
		md = map[string]json.RawMessage{}
	}
	md["resourceVersion"], _ = json.Marshal(c.store.localRV())
	top["metadata"], _ = json.Marshal(md)
	raw, _ = json.Marshal(top)
	norm, _, err := normalize(raw, "", "")
	if err != nil {
		return raw
	}
	lists := c.store.listsHolding(key)
	for _, l := range lists {
		c.store.event(logger, l, item{key: key, raw: norm}, true, "")
	}
	if _, ok := c.store.get(key); ok && len(lists) == 0 {
		c.store.putGet(logger, item{key: key, raw: norm})
	}
	c.notify(lists, "MODIFIED", norm)
	return norm
}

// rewriteSlices gives pod's endpoints in the kept EndpointSlices the pod's
// addresses and readiness.
func (c *Cache) rewriteSlices(logger klog.Logger, pod *corev1.Pod) {
	ready := pod.DeletionTimestamp == nil && podReady(pod)
	seen := map[string]bool{}
	for _, l := range c.store.listKeys("endpointslices") {
		_, _, _, items, _ := c.store.listed(l)
		for _, it := range items {
			if seen[it.key] {
				continue
			}
			seen[it.key] = true
			var s discoveryv1.EndpointSlice
			if json.Unmarshal(it.raw, &s) != nil {
				continue
			}
			if !pointSlice(&s, pod, ready) {
				continue
			}
			raw, err := json.Marshal(&s)
			if err != nil {
				continue
			}
			c.keepLocal(logger, it.key, raw)
			logger.V(2).Info("EndpointSlice follows its pod's new status in the node's cache", "slice", s.Namespace+"/"+s.Name, "pod", pod.Name)
		}
	}
}

// pointSlice sets pod's endpoints in s to its addresses of s's family and
// its readiness; it reports whether s changed.
func pointSlice(s *discoveryv1.EndpointSlice, pod *corev1.Pod, ready bool) bool {
	var addrs []string
	for _, ip := range pod.Status.PodIPs {
		v6 := strings.Contains(ip.IP, ":")
		if (s.AddressType == discoveryv1.AddressTypeIPv6) == v6 && s.AddressType != discoveryv1.AddressTypeFQDN {
			addrs = append(addrs, ip.IP)
		}
	}
	changed := false
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		ref := ep.TargetRef
		if ref == nil || ref.Kind != "Pod" || (ref.UID != "" && ref.UID != pod.UID) || ref.Name != pod.Name || ref.Namespace != pod.Namespace {
			continue
		}
		if len(addrs) > 0 && !slices.Equal(ep.Addresses, addrs) {
			ep.Addresses = slices.Clone(addrs)
			changed = true
		}
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready != ready {
			ep.Conditions.Ready = &ready
			changed = true
		}
		if ep.Conditions.Serving == nil || *ep.Conditions.Serving != ready {
			serving := ready
			ep.Conditions.Serving = &serving
			changed = true
		}
	}
	return changed
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
