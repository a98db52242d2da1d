package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager of every object the
// manifests directory applies.
const FieldManager = "edgeplane"

// AnnotationSource names the manifest file an object was applied from.
const AnnotationSource = "edgeplane.io/manifest"

// objectRef is one object a file applied.
type objectRef struct {
	gvr       schema.GroupVersionResource
	kind      string
	namespace string
	name      string
}

func (r objectRef) String() string {
	if r.namespace == "" {
		return r.kind + "/" + r.name
	}
	return r.kind + " " + r.namespace + "/" + r.name
}

// decode splits a multi-document YAML (or JSON) file into objects; empty
// documents are skipped, and a document without kind or name is an error.
func decode(file string, data []byte) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for i := 1; ; i++ {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		switch {
		case u.GetAPIVersion() == "" || u.GetKind() == "":
			return nil, fmt.Errorf("%s: document %d has no apiVersion or kind", file, i)
		case u.GetName() == "":
			return nil, fmt.Errorf("%s: document %d (%s) has no metadata.name", file, i, u.GetKind())
		case strings.HasSuffix(u.GetKind(), "List"):
			return nil, fmt.Errorf("%s: document %d is a %s: write its items as separate documents", file, i, u.GetKind())
		}
		objs = append(objs, u)
	}
}

// client applies and deletes objects through the dynamic client, mapping
// kinds to resources with discovery (reset when a kind is not known, so a
// CRD created since is found).
type client struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// errUnknownKind is a kind the API server does not serve (yet).
type errUnknownKind struct {
	gvk schema.GroupVersionKind
	err error
}

func (e *errUnknownKind) Error() string {
	return fmt.Sprintf("kind %s is not known to the API server (yet): %v", e.gvk, e.err)
}

// resolve finds obj's resource and fixes its namespace: "default" for a
// namespaced object without one, none for a cluster-scoped one.
func (c *client) resolve(obj *unstructured.Unstructured) (objectRef, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		if meta.IsNoMatchError(err) {
			return objectRef{}, &errUnknownKind{gvk: gvk, err: err}
		}
		return objectRef{}, err
	}
	ref := objectRef{gvr: mapping.Resource, kind: gvk.Kind, name: obj.GetName()}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		ref.namespace = obj.GetNamespace()
	} else {
		obj.SetNamespace("")
	}
	return ref, nil
}

func (c *client) resource(r objectRef) dynamic.ResourceInterface {
	if r.namespace == "" {
		return c.dyn.Resource(r.gvr)
	}
	return c.dyn.Resource(r.gvr).Namespace(r.namespace)
}

// apply server-side applies obj, marked with the file it came from.
func (c *client) apply(ctx context.Context, file string, obj *unstructured.Unstructured) (objectRef, error) {
	obj = obj.DeepCopy()
	ref, err := c.resolve(obj)
	if err != nil {
		return objectRef{}, err
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationSource] = file
	obj.SetAnnotations(ann)
	_, err = c.resource(ref).Apply(ctx, ref.name, obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return ref, fmt.Errorf("apply %s: %w", ref, err)
	}
	return ref, nil
}

// exists tells whether the object is there, read from the API server's
// watch cache (resourceVersion 0): a read that costs the datastore nothing.
func (c *client) exists(ctx context.Context, r objectRef) (bool, error) {
	_, err := c.resource(r).Get(ctx, r.name, metav1.GetOptions{ResourceVersion: "0"})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// delete deletes the object, with its dependents in the background; one
// already gone is no error.
func (c *client) delete(ctx context.Context, r objectRef) error {
	policy := metav1.DeletePropagationBackground
	err := c.resource(r).Delete(ctx, r.name, metav1.DeleteOptions{PropagationPolicy: &policy})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", r, err)
	}
	return nil
}
