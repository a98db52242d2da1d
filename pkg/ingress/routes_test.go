package ingress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type pathSpec struct {
	path, typ, svc string
}

// ing is an Ingress in default made at t0+age seconds, one rule per host
// ("" for none), each with the paths given.
func ing(name string, age int, class *string, rules map[string][]pathSpec) *networkingv1.Ingress {
	i := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + namedUID(name)),
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}}
	i.Spec.IngressClassName = class
	hosts := make([]string, 0, len(rules))
	for h := range rules {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		r := networkingv1.IngressRule{Host: h, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
		for _, p := range rules[h] {
			r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: p.path, PathType: ptr.To(networkingv1.PathType(p.typ)),
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: p.svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}})
		}
		i.Spec.Rules = append(i.Spec.Rules, r)
	}
	return i
}

func namedUID(s string) string { return fmt.Sprintf("%x", s) }

// svcWithSlice is a Service named name (port 80 "web" to 8080) and its
// EndpointSlice with one ready endpoint at ip.
func svcWithSlice(name, ip string) (*corev1.Service, *discoveryv1.EndpointSlice) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 80}}}}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-x", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("web"), Port: ptr.To(int32(8080))}}}
	return svc, sl
}

func objects(ings []*networkingv1.Ingress, classes ...*networkingv1.IngressClass) Objects {
	o := Objects{Ingresses: ings, Classes: map[string]*networkingv1.IngressClass{}, Services: map[string]*corev1.Service{},
		Slices: map[string][]*discoveryv1.EndpointSlice{},
		Cert:   func(string, string) (*tls.Certificate, error) { return nil, errors.New("no such Secret") }}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		svc, sl := svcWithSlice(name, fmt.Sprintf("10.42.0.%d", i+1))
		o.Services["default/"+name] = svc
		o.Slices["default/"+name] = []*discoveryv1.EndpointSlice{sl}
	}
	for _, c := range classes {
		o.Classes[c.Name] = c
	}
	return o
}

func class(name, controller string, isDefault bool) *networkingv1.IngressClass {
	c := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if isDefault {
		c.Annotations = map[string]string{DefaultClassAnnotation: "true"}
	}
	return c
}

// backendName is the Service a request goes to ("" for none).
func backendName(t *Table, host, path string) string {
	b := t.Match(host, path)
	if b == nil {
		return ""
	}
	return b.Name
}

func TestMatch(t *testing.T) {
	ours := ptr.To(ClassName)
	ings := []*networkingv1.Ingress{
		ing("paths", 0, ours, map[string][]pathSpec{"a.example": {
			{"/", "Prefix", "a"}, {"/foo", "Prefix", "b"}, {"/foo", "Exact", "c"}, {"/foo/bar/", "Prefix", "d"}, {"/img", "ImplementationSpecific", "e"},
		}}),
		ing("wild", 1, ours, map[string][]pathSpec{"*.wild.example": {{"/", "Prefix", "b"}}, "B.EXAMPLE": {{"/exact", "Exact", "c"}}}),
		ing("nohost", 2, ours, map[string][]pathSpec{"": {{"/shared", "Prefix", "e"}}}),
		// Younger: loses the host and path it shares with "paths".
		ing("younger", 3, ours, map[string][]pathSpec{"a.example": {{"/foo", "Prefix", "e"}}}),
	}
	withDefault := ing("default", 4, ours, nil)
	withDefault.Spec.DefaultBackend = &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "d", Port: networkingv1.ServiceBackendPort{Name: "web"}}}
	table, _, problems := Build(objects(append(ings, withDefault), class(ClassName, ControllerName, true)))
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	tests := []struct{ host, path, want string }{
		{"a.example", "/", "default/a:80"},
		{"a.example", "/other", "default/a:80"},
		{"a.example", "/foo", "default/c:80"},  // Exact before Prefix at equal length
		{"a.example", "/foo/", "default/b:80"}, // Exact /foo does not match /foo/
		{"a.example", "/foo/x", "default/b:80"},
		{"a.example", "/foobar", "default/a:80"},      // element-wise: /foo is no prefix of /foobar
		{"a.example", "/foo/bar", "default/d:80"},     // longest prefix; its trailing slash does not count
		{"a.example", "/foo/bar/baz", "default/d:80"}, //
		{"a.example", "/foo/./bar", "default/d:80"},   // matched as the backend reads it
		{"a.example", "/img/x.png", "default/e:80"},   // ImplementationSpecific is Prefix
		{"A.Example:8080", "/foo", "default/c:80"},    // port and case of the Host header do not count
		{"a.example.", "/foo", "default/c:80"},        // nor a trailing dot
		{"x.wild.example", "/", "default/b:80"},       // wildcard: one label
		{"y.x.wild.example", "/", "default/d:web"},    // not two: the default backend
		{"wild.example", "/", "default/d:web"},        // not none
		{"b.example", "/exact", "default/c:80"},       // hosts are case-insensitive
		{"b.example", "/shared/x", "default/e:80"},    // a host's rules fall through to rules without a host
		{"unknown.example", "/shared", "default/e:80"},
		{"unknown.example", "/", "default/d:web"}, // the default backend
		{"a.example", "/public/../foo", "default/c:80"},
	}
	for _, tt := range tests {
		if got := backendName(table, tt.host, tt.path); got != tt.want {
			t.Errorf("%s%s goes to %q, want %q", tt.host, tt.path, got, tt.want)
		}
	}
	if got := backendName(&Table{}, "a.example", "/"); got != "" {
		t.Errorf("an empty table routes to %q", got)
	}
}

func TestOurs(t *testing.T) {
	own := class(ClassName, ControllerName, true)
	ownNotDefault := class(ClassName, ControllerName, false)
	nginx := class("nginx", "k8s.io/ingress-nginx", false)
	traefik := class(K3sClassName, "traefik.io/ingress-controller", false)
	legacy := ing("legacy", 0, nil, nil)
	legacy.Annotations = map[string]string{legacyClassAnnotation: "nginx"}
	tests := []struct {
		name    string
		ing     *networkingv1.Ingress
		classes []*networkingv1.IngressClass
		want    bool
	}{
		{"our class", ing("x", 0, ptr.To(ClassName), nil), []*networkingv1.IngressClass{own}, true},
		{"another controller's class", ing("x", 0, ptr.To("nginx"), nil), []*networkingv1.IngressClass{own, nginx}, false},
		{"a class that does not exist", ing("x", 0, ptr.To("nginx"), nil), []*networkingv1.IngressClass{own}, false},
		{"no class, ours is default", ing("x", 0, nil, nil), []*networkingv1.IngressClass{own, nginx}, true},
		{"no class, ours is not default", ing("x", 0, nil, nil), []*networkingv1.IngressClass{ownNotDefault}, false},
		{"no class, no classes", ing("x", 0, nil, nil), nil, false},
		{"k3s's traefik with no such class", ing("x", 0, ptr.To(K3sClassName), nil), []*networkingv1.IngressClass{own}, true},
		{"k3s's traefik with a real Traefik installed", ing("x", 0, ptr.To(K3sClassName), nil), []*networkingv1.IngressClass{own, traefik}, false},
		{"the legacy annotation naming another class", legacy, []*networkingv1.IngressClass{own, nginx}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			classes := map[string]*networkingv1.IngressClass{}
			for _, c := range tt.classes {
				classes[c.Name] = c
			}
			if got := Ours(tt.ing, classes); got != tt.want {
				t.Errorf("Ours = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	o := objects(nil)
	o.Services["default/multi"] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "multi", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "admin", Port: 9000}}}}
	o.Services["default/ext"] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}
	o.Services["default/gone"] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	cond := func(ready, serving, terminating bool) discoveryv1.EndpointConditions {
		return discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}
	}
	o.Slices["default/multi"] = []*discoveryv1.EndpointSlice{
		{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.1.2"}, Conditions: cond(true, true, false)}, {Addresses: []string{"10.42.1.3"}, Conditions: cond(false, false, false)}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}, {Name: ptr.To("admin"), Port: ptr.To(int32(9090))}}},
		{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.2.2"}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}, {Name: ptr.To("admin"), Port: ptr.To(int32(9090))}}},
	}
	o.Slices["default/gone"] = []*discoveryv1.EndpointSlice{
		{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.3.2"}, Conditions: cond(false, true, true)}, {Addresses: []string{"10.42.3.3"}, Conditions: cond(false, false, true)}},
			Ports: []discoveryv1.EndpointPort{{Port: ptr.To(int32(8080))}}},
	}
	tests := []struct {
		name        string
		svc         string
		port        networkingv1.ServiceBackendPort
		want        []string
		wantProblem string
	}{
		{"by number, ready endpoints of every slice", "multi", networkingv1.ServiceBackendPort{Number: 80}, []string{"10.42.1.2:8080", "10.42.2.2:8080"}, ""},
		{"by name", "multi", networkingv1.ServiceBackendPort{Name: "admin"}, []string{"10.42.1.2:9090", "10.42.2.2:9090"}, ""},
		{"no such port", "multi", networkingv1.ServiceBackendPort{Number: 81}, nil, "the Service has no such port"},
		{"no such Service", "none", networkingv1.ServiceBackendPort{Number: 80}, nil, "no such Service"},
		{"ExternalName", "ext", networkingv1.ServiceBackendPort{Number: 80}, nil, "ExternalName Services are not supported"},
		{"only terminating serving endpoints", "gone", networkingv1.ServiceBackendPort{Number: 80}, []string{"10.42.3.2:8080"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := resolve("default", &networkingv1.IngressServiceBackend{Name: tt.svc, Port: tt.port}, o)
			if !slices.Equal(be.Endpoints, tt.want) || be.Problem != tt.wantProblem {
				t.Errorf("endpoints %v problem %q, want %v %q", be.Endpoints, be.Problem, tt.want, tt.wantProblem)
			}
		})
	}
	be := &Backend{Endpoints: []string{"x", "y"}}
	if got := []string{be.Pick(), be.Pick(), be.Pick()}; !slices.Equal(got, []string{"x", "y", "x"}) {
		t.Errorf("Pick is not round robin: %v", got)
	}
}

func TestBuildProblems(t *testing.T) {
	bad := ing("bad", 0, ptr.To(ClassName), map[string][]pathSpec{"x.example": {{"/", "Prefix", "missing"}}})
	bad.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"x.example"}, SecretName: "nosecret"}}
	other := ing("other", 0, ptr.To("nginx"), map[string][]pathSpec{"y.example": {{"/", "Prefix", "missing"}}})
	_, ours, problems := Build(objects([]*networkingv1.Ingress{bad, other}, class(ClassName, ControllerName, true), class("nginx", "k8s.io/ingress-nginx", false)))
	if len(ours) != 1 || ours[0].Name != "bad" {
		t.Errorf("ours = %v, want [bad]", ours)
	}
	want := []string{"default/missing:80: no such Service", "TLS Secret default/nosecret: no such Secret"}
	if !slices.Equal(problems["default/bad"], want) || len(problems) != 1 {
		t.Errorf("problems = %v, want default/bad: %v", problems, want)
	}
}
