package ingress

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Names k3s users' manifests and the Ingress API use.
const (
	// ControllerName is spec.controller of the IngressClasses this
	// controller serves.
	ControllerName = "edgeplane.io/ingress"
	// ClassName is the packaged IngressClass, marked default.
	ClassName = "edgeplane"
	// K3sClassName is k3s's Traefik class: Ingresses naming it are served
	// while no IngressClass of that name exists (a real Traefik installed
	// later creates one and takes them over).
	K3sClassName = "traefik"
	// DefaultClassAnnotation marks the default IngressClass.
	DefaultClassAnnotation = "ingressclass.kubernetes.io/is-default-class"
	// legacyClassAnnotation is the class of Ingresses from before
	// spec.ingressClassName.
	legacyClassAnnotation = "kubernetes.io/ingress.class"
)

// Ours tells whether ing is served by this controller, given the
// IngressClasses by name: its class (spec.ingressClassName, else the legacy
// annotation) is an IngressClass of ControllerName, or K3sClassName while
// no such IngressClass exists; an Ingress with no class is ours when an
// IngressClass of ours is marked default (Ingresses made before the class
// existed have none).
func Ours(ing *networkingv1.Ingress, classes map[string]*networkingv1.IngressClass) bool {
	name := ing.Annotations[legacyClassAnnotation]
	if ing.Spec.IngressClassName != nil {
		name = *ing.Spec.IngressClassName
	}
	if name == "" {
		for _, c := range classes {
			if c.Spec.Controller == ControllerName && c.Annotations[DefaultClassAnnotation] == "true" {
				return true
			}
		}
		return false
	}
	if c, ok := classes[name]; ok {
		return c.Spec.Controller == ControllerName
	}
	return name == K3sClassName
}

// Table is the routing of every Ingress of ours at one moment: immutable
// once built, swapped whole on every change.
type Table struct {
	// exact, wildcard (by the suffix after "*.") and anyHost are the
	// routes by host, each sorted by precedence.
	exact, wildcard map[string][]route
	anyHost         []route
	// defaultBackend is the oldest Ingress's spec.defaultBackend.
	defaultBackend *Backend
	// certs are TLS certificates by host ("*.example.com" for a
	// wildcard); bySAN are those of TLS entries with no hosts, chosen by
	// the names the certificate holds.
	certs map[string]*tls.Certificate
	bySAN []*tls.Certificate
}

type route struct {
	path    string // an Exact path as given; a Prefix path without its trailing slash ("" for "/")
	exact   bool
	backend *Backend
}

// Backend is a Service port of an Ingress: the endpoints it has now.
type Backend struct {
	// Name is namespace/service:port, for logs.
	Name string
	// Endpoints are the ready endpoints' host:port, sorted.
	Endpoints []string
	// Problem says why there are no endpoints (no such Service, port...).
	Problem string

	next atomic.Uint32
}

// Pick chooses the next endpoint, round robin; "" when there is none.
func (b *Backend) Pick() string {
	if len(b.Endpoints) == 0 {
		return ""
	}
	return b.Endpoints[int(b.next.Add(1)-1)%len(b.Endpoints)]
}

// Match finds the backend of a request for host (the Host header, port
// and case as sent) and path (the URL's path): the routes of the exact
// host, then of a matching wildcard host, then of rules without a host,
// the first whose path matches (longest path first, Exact before Prefix
// at equal length), else the default backend; nil when nothing matches.
func (t *Table) Match(host, path string) *Backend {
	if t == nil {
		return nil
	}
	host = normalizeHost(host)
	path = cleanPath(path)
	if b := matchPath(t.exact[host], path); b != nil {
		return b
	}
	if _, suffix, ok := strings.Cut(host, "."); ok {
		if b := matchPath(t.wildcard[suffix], path); b != nil {
			return b
		}
	}
	if b := matchPath(t.anyHost, path); b != nil {
		return b
	}
	return t.defaultBackend
}

func matchPath(routes []route, path string) *Backend {
	for _, r := range routes {
		if r.exact {
			if path == r.path {
				return r.backend
			}
			continue
		}
		// Prefix: element by element ("/foo" matches "/foo" and "/foo/bar",
		// not "/foobar"); the request's trailing slash does not count.
		p := strings.TrimSuffix(path, "/")
		if r.path == "" || p == r.path || strings.HasPrefix(p, r.path+"/") {
			return r.backend
		}
	}
	return nil
}

// normalizeHost is the host of a Host header or SNI name: without port,
// lower case, without a trailing dot.
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// cleanPath resolves "." and ".." and doubled slashes, so that a request
// is matched as the backend will read it ("/public/../admin" is
// "/admin"), keeping a trailing slash (Exact "/foo" does not match
// "/foo/").
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	c := cleanSlashPath(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// Objects are what a Table is built from.
type Objects struct {
	Ingresses []*networkingv1.Ingress
	Classes   map[string]*networkingv1.IngressClass
	// Services by namespace/name; Slices by namespace/service name.
	Services map[string]*corev1.Service
	Slices   map[string][]*discoveryv1.EndpointSlice
	// Cert returns the certificate of a TLS Secret (namespace, name), or
	// why there is none.
	Cert func(namespace, name string) (*tls.Certificate, error)
}

// Build makes the table of the Ingresses of ours in o. Where two Ingresses
// claim the same host and path (or TLS host, or default backend), the
// older one wins (creation time, then namespace/name), as in other
// controllers. problems lists what could not be served, per Ingress.
func Build(o Objects) (t *Table, ours []*networkingv1.Ingress, problems map[string][]string) {
	t = &Table{exact: map[string][]route{}, wildcard: map[string][]route{}, certs: map[string]*tls.Certificate{}}
	problems = map[string][]string{}
	for _, ing := range o.Ingresses {
		if Ours(ing, o.Classes) {
			ours = append(ours, ing)
		}
	}
	slices.SortFunc(ours, func(a, b *networkingv1.Ingress) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	backends := map[string]*Backend{}
	backend := func(ns string, b *networkingv1.IngressBackend) *Backend {
		if b.Service == nil {
			return &Backend{Name: ns + "/<resource backend>", Problem: "resource backends are not supported"}
		}
		key := ns + "/" + b.Service.Name + ":" + portString(b.Service.Port)
		if be, ok := backends[key]; ok {
			return be
		}
		be := resolve(ns, b.Service, o)
		backends[key] = be
		return be
	}
	for _, ing := range ours {
		key := ing.Namespace + "/" + ing.Name
		report := func(be *Backend) {
			if be.Problem != "" {
				problems[key] = append(problems[key], be.Name+": "+be.Problem)
			}
		}
		if ing.Spec.DefaultBackend != nil && t.defaultBackend == nil {
			t.defaultBackend = backend(ing.Namespace, ing.Spec.DefaultBackend)
			report(t.defaultBackend)
		}
		for _, rule := range ing.Spec.Rules {
			if rule.HTTP == nil {
				continue
			}
			host := strings.ToLower(rule.Host)
			for _, p := range rule.HTTP.Paths {
				be := backend(ing.Namespace, &p.Backend)
				report(be)
				r := newRoute(p, be)
				switch {
				case host == "":
					t.anyHost = addRoute(t.anyHost, r)
				case strings.HasPrefix(host, "*."):
					t.wildcard[host[2:]] = addRoute(t.wildcard[host[2:]], r)
				default:
					t.exact[host] = addRoute(t.exact[host], r)
				}
			}
		}
		for _, entry := range ing.Spec.TLS {
			if entry.SecretName == "" {
				continue
			}
			cert, err := o.Cert(ing.Namespace, entry.SecretName)
			if err != nil {
				problems[key] = append(problems[key], fmt.Sprintf("TLS Secret %s/%s: %v", ing.Namespace, entry.SecretName, err))
				continue
			}
			if len(entry.Hosts) == 0 {
				t.bySAN = append(t.bySAN, cert)
			}
			for _, h := range entry.Hosts {
				h = strings.ToLower(h)
				if _, taken := t.certs[h]; !taken {
					t.certs[h] = cert
				}
			}
		}
	}
	for _, m := range []map[string][]route{t.exact, t.wildcard} {
		for _, rs := range m {
			sortRoutes(rs)
		}
	}
	sortRoutes(t.anyHost)
	return t, ours, problems
}

func newRoute(p networkingv1.HTTPIngressPath, be *Backend) route {
	path := p.Path
	if path == "" {
		path = "/"
	}
	if p.PathType != nil && *p.PathType == networkingv1.PathTypeExact {
		return route{path: path, exact: true, backend: be}
	}
	// Prefix, and ImplementationSpecific (taken as Prefix, as Traefik does).
	return route{path: strings.TrimSuffix(cleanSlashPath(path), "/"), backend: be}
}

// addRoute appends r unless an older Ingress has the same path and type.
func addRoute(rs []route, r route) []route {
	for _, x := range rs {
		if x.path == r.path && x.exact == r.exact {
			return rs
		}
	}
	return append(rs, r)
}

// sortRoutes orders by precedence: longest path first, Exact before Prefix
// at equal length; stable, so older Ingresses first otherwise.
func sortRoutes(rs []route) {
	slices.SortStableFunc(rs, func(a, b route) int {
		if c := cmp.Compare(len(b.path), len(a.path)); c != 0 {
			return c
		}
		switch {
		case a.exact && !b.exact:
			return -1
		case b.exact && !a.exact:
			return 1
		}
		return 0
	})
}

func portString(p networkingv1.ServiceBackendPort) string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(int(p.Number))
}

// resolve finds the endpoints of a Service port: the Service's port (by
// number or name), then the port of that name in its EndpointSlices, at the
// ready endpoints (else the serving ones that are terminating, as
// kube-proxy falls back to).
func resolve(ns string, sb *networkingv1.IngressServiceBackend, o Objects) *Backend {
	be := &Backend{Name: ns + "/" + sb.Name + ":" + portString(sb.Port)}
	svc, ok := o.Services[ns+"/"+sb.Name]
	if !ok {
		be.Problem = "no such Service"
		return be
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		be.Problem = "ExternalName Services are not supported"
		return be
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if (sb.Port.Name != "" && p.Name == sb.Port.Name) || (sb.Port.Name == "" && p.Port == sb.Port.Number) {
			sp = p
			break
		}
	}
	if sp == nil {
		be.Problem = "the Service has no such port"
		return be
	}
	var ready, terminating []string
	for _, s := range o.Slices[ns+"/"+sb.Name] {
		var port int32
		for _, p := range s.Ports {
			if ptrString(p.Name) == sp.Name && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			isReady := e.Conditions.Ready == nil || *e.Conditions.Ready
			serving := e.Conditions.Serving != nil && *e.Conditions.Serving
			terminatingNow := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			for _, a := range e.Addresses {
				hp := net.JoinHostPort(a, strconv.Itoa(int(port)))
				switch {
				case isReady:
					ready = append(ready, hp)
				case serving && terminatingNow:
					terminating = append(terminating, hp)
				}
			}
		}
	}
	eps := ready
	if len(eps) == 0 {
		eps = terminating
	}
	slices.Sort(eps)
	be.Endpoints = slices.Compact(eps)
	return be
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
