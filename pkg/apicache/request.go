package apicache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// What the cache does with a request.
type action int

const (
	// forward only: writes, and reads of what is not worth keeping.
	forward action = iota
	// get, list, watch: forwarded and kept, served from the cache offline.
	read
	// token: a service account token request, kept by its request.
	token
	// podStatus: the kubelet's pod status update, applied to the cache
	// offline.
	podStatus
)

// notKept are resources the node's parts read that are of no use offline:
// what is written every few seconds (Leases), events, and reviews.
var notKept = sets.New("leases", "events", "tokenreviews", "subjectaccessreviews",
	"selfsubjectaccessreviews", "selfsubjectreviews", "certificatesigningrequests")

var infoFactory = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// request is a request as the cache sees it.
type request struct {
	action action
	info   *apirequest.RequestInfo
	// list is the key of the list a list or watch reads (path and
	// selectors); object the key of the object a get reads or a status
	// update writes.
	list, object string
	// prefix and resource locate objects: "api/v1" or
	// "apis/<group>/<version>", and the resource.
	prefix string
}

// classify says what the cache does with r.
func classify(r *http.Request) request {
	info, err := infoFactory.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return request{action: forward}
	}
	q := request{action: forward, info: info, prefix: info.APIPrefix + "/" + info.APIVersion}
	if info.APIGroup != "" {
		q.prefix = info.APIPrefix + "/" + info.APIGroup + "/" + info.APIVersion
	}
	switch {
	case info.Verb == "create" && info.Resource == "serviceaccounts" && info.Subresource == "token":
		q.action = token
	case (info.Verb == "patch" || info.Verb == "update") && info.Resource == "pods" && info.Subresource == "status" && info.APIGroup == "":
		q.action = podStatus
		q.object = objectKey(q.prefix, "pods", info.Namespace, info.Name)
	case info.Subresource != "" || notKept.Has(info.Resource) || !plainAccept(r.Header.Get("Accept")):
	case info.Verb == "get":
		q.action = read
		q.object = objectKey(q.prefix, info.Resource, info.Namespace, info.Name)
	case info.Verb == "list" || info.Verb == "watch":
		if len(info.Parts) > 1 { // a watch of one object by its path (deprecated form)
			return q
		}
		q.action = read
		v := r.URL.Query()
		q.list = listKey(q.prefix, info.Resource, info.Namespace, v.Get("labelSelector"), v.Get("fieldSelector"))
	}
	return q
}

// plainAccept tells whether a request asks for objects as they are (JSON or
// protobuf), not as a Table or metadata only.
func plainAccept(accept string) bool { return !strings.Contains(accept, "as=") }

// objectKey and listKey are the store's keys.
func objectKey(prefix, resource, namespace, name string) string {
	return prefix + "|" + resource + "|" + namespace + "|" + name
}

func listKey(prefix, resource, namespace, label, field string) string {
	return prefix + "|" + resource + "|" + namespace + "|l=" + label + "|f=" + field
}

// resourceOfList is the prefix and resource of a list key.
func resourceOfList(key string) (prefix, resource string) {
	parts := strings.SplitN(key, "|", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[1]
}

// tokenKey keys a token request by service account and request body.
func tokenKey(namespace, name string, body []byte) string {
	sum := sha256.Sum256(body)
	return namespace + "|" + name + "|" + hex.EncodeToString(sum[:])
}

// meta is what the cache reads of an object's metadata.
type meta struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion"`
}

// normalize is raw as the cache keeps it: without metadata.managedFields
// (of no use to the node's parts, and the largest part of many objects),
// with apiVersion and kind (a list's items come without), keys in one order,
// so that an unchanged object compares equal.
func normalize(raw []byte, apiVersion, kind string) ([]byte, meta, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, meta{}, err
	}
	var md map[string]json.RawMessage
	if err := json.Unmarshal(top["metadata"], &md); err != nil || md == nil {
		return nil, meta{}, errors.New("an object with no metadata")
	}
	if _, ok := md["managedFields"]; ok {
		delete(md, "managedFields")
		b, err := json.Marshal(md)
		if err != nil {
			return nil, meta{}, err
		}
		top["metadata"] = b
	}
	if _, ok := top["apiVersion"]; !ok && apiVersion != "" {
		top["apiVersion"], _ = json.Marshal(apiVersion)
	}
	if _, ok := top["kind"]; !ok && kind != "" {
		top["kind"], _ = json.Marshal(kind)
	}
	var m meta
	if err := json.Unmarshal(top["metadata"], &m); err != nil {
		return nil, meta{}, err
	}
	out, err := json.Marshal(top)
	return out, m, err
}

// objectRV is an object's resourceVersion as a number (0: none).
func objectRV(raw []byte) uint64 {
	var o struct {
		Metadata meta `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return 0
	}
	rv, _ := strconv.ParseUint(o.Metadata.ResourceVersion, 10, 64)
	return rv
}
