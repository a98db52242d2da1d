package ingress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// backend is a local HTTP server standing for a pod: it answers its name
// and the headers the proxy set.
func backend(t *testing.T, name string) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s host=%s xff=%s xfh=%s xfp=%s", name, r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// routeDialer dials the local address a pod address stands for: the API
// server refuses loopback endpoints, so the EndpointSlices name addresses
// of a documentation range.
func routeDialer(routes map[string]string) Dialer {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := routes[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, network, addr)
	}
}

// selfSignedPEM is a certificate and key for host.
func selfSignedPEM(t *testing.T, host string) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func create[T any](t *testing.T, f func(context.Context, T, metav1.CreateOptions) (T, error), obj T) T {
	t.Helper()
	out, err := f(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// eventually polls f for up to a minute.
func eventually(t *testing.T, what string, f func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		ok, err := f()
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// get fetches url with the Host header host through the proxy.
func get(client *http.Client, url, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func ingressStatus(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	i, err := cs.NetworkingV1().Ingresses("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return lbString(i.Status.LoadBalancer.Ingress)
}

// TestController runs the controller against a real API server: routes by
// host through its HTTP and HTTPS listeners, its node's EndpointSlice, the
// Ingresses' status, no writes when idle, an Ingress that changes class,
// and Cleanup.
func TestController(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	cs := srv.Client(t)
	if err := EnsureRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}

	// The packaged manifest's objects, and two backends.
	create(t, cs.NetworkingV1().IngressClasses().Create, class(ClassName, ControllerName, true))
	create(t, cs.NetworkingV1().IngressClasses().Create, class("nginx", "k8s.io/ingress-nginx", false))
	create(t, cs.CoreV1().Services(ServiceNamespace).Create, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ServiceName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}})
	routes := map[string]string{}
	for i, name := range []string{"a", "b"} {
		svc, sl := svcWithSlice(name, fmt.Sprintf("192.0.2.%d", 10+i))
		create(t, cs.CoreV1().Services("default").Create, svc)
		create(t, cs.DiscoveryV1().EndpointSlices("default").Create, sl)
		routes[fmt.Sprintf("192.0.2.%d:8080", 10+i)] = backend(t, "backend-"+name)
	}
	crt, key := selfSignedPEM(t, "a.example")
	create(t, cs.CoreV1().Secrets("default").Create, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": crt, "tls.key": key}})
	web := ing("web", 0, nil, map[string][]pathSpec{"a.example": {{"/", "Prefix", "a"}}, "b.example": {{"/", "Prefix", "b"}}})
	web.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"a.example"}, SecretName: "a-tls"}}
	web.UID, web.CreationTimestamp = "", metav1.Time{}
	web = create(t, cs.NetworkingV1().Ingresses("default").Create, web)

	c, err := New(Options{Kubeconfig: srv.Kubeconfig, NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("192.0.2.1")},
		HTTPAddress: "127.0.0.1:0", HTTPSAddress: "127.0.0.1:0", Dial: routeDialer(routes)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	var httpAddr, httpsAddr net.Addr
	eventually(t, "both listeners bound", func() (bool, error) {
		httpAddr, httpsAddr = c.Addresses()
		return httpAddr != nil && httpsAddr != nil, nil
	})
	httpURL, httpsURL := "http://"+httpAddr.String()+"/", "https://"+httpsAddr.String()+"/"
	plain := &http.Client{Timeout: 10 * time.Second}

	t.Run("routes by host", func(t *testing.T) {
		for host, want := range map[string]string{"a.example": "backend-a host=a.example", "b.example": "backend-b host=b.example"} {
			eventually(t, host, func() (bool, error) {
				code, body, err := get(plain, httpURL, host)
				return code == 200 && strings.HasPrefix(body, want), fmt.Errorf("%d %q %v", code, body, err)
			})
		}
		code, body, err := get(plain, httpURL, "a.example")
		if err != nil || !strings.Contains(body, "xff=127.0.0.1 xfh=a.example xfp=http") {
			t.Errorf("X-Forwarded-* headers: %d %q %v", code, body, err)
		}
		if code, body, err := get(plain, httpURL, "c.example"); code != http.StatusNotFound {
			t.Errorf("an unknown host got %d %q %v, want 404", code, body, err)
		}
	})

	t.Run("TLS with the Ingress's Secret by SNI", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(crt)
		tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "a.example"}}}
		code, body, err := get(tlsClient, httpsURL, "a.example")
		if err != nil || code != 200 || !strings.HasPrefix(body, "backend-a host=a.example") || !strings.Contains(body, "xfp=https") {
			t.Errorf("https://a.example: %d %q %v", code, body, err)
		}
		// A name with no certificate gets the self-signed fallback.
		conn, err := tls.Dial("tcp", httpsAddr.String(), &tls.Config{ServerName: "b.example", InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "edgeplane ingress default certificate" {
			t.Errorf("b.example got the certificate of %q, want the fallback", cn)
		}
		if _, err := tls.Dial("tcp", httpsAddr.String(), &tls.Config{ServerName: "a.example", RootCAs: pool, MaxVersion: tls.VersionTLS11}); err == nil {
			t.Error("a TLS 1.1 client was accepted")
		}
	})

	t.Run("its node's EndpointSlice and the Ingress's status", func(t *testing.T) {
		eventually(t, "the EndpointSlice", func() (bool, error) {
			s, err := cs.DiscoveryV1().EndpointSlices(ServiceNamespace).Get(ctx, sliceName("n1", false), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			want := fmt.Sprintf("[192.0.2.1] true true false n1;http TCP %d;https TCP %d;", portOf(httpAddr), portOf(httpsAddr))
			got := endpointsString(s.Endpoints) + portsString(s.Ports)
			return got == want && len(s.OwnerReferences) == 1 && s.OwnerReferences[0].Name == ServiceName, fmt.Errorf("got %q, want %q", got, want)
		})
		eventually(t, "the status from the EndpointSlices", func() (bool, error) {
			got := ingressStatus(t, cs, "web")
			return got == "192.0.2.1", fmt.Errorf("status %q", got)
		})
		// What servicelb sets on the Service wins.
		svc, err := cs.CoreV1().Services(ServiceNamespace).Get(ctx, ServiceName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}, {IP: "203.0.113.6"}}
		if _, err := cs.CoreV1().Services(ServiceNamespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the status from the Service", func() (bool, error) {
			got := ingressStatus(t, cs, "web")
			return got == "203.0.113.5,203.0.113.6", fmt.Errorf("status %q", got)
		})
	})

	t.Run("idle syncs write nothing", func(t *testing.T) {
		before, writes := resourceVersions(t, cs), c.writes.Load()
		for range 5 {
			n := c.syncs.Load()
			c.trigger()
			eventually(t, "a sync", func() (bool, error) { return c.syncs.Load() > n, nil })
		}
		if after := resourceVersions(t, cs); after != before {
			t.Errorf("idle syncs wrote: before %s, after %s", before, after)
		}
		if n := c.writes.Load() - writes; n != 0 {
			t.Errorf("idle syncs sent %d write requests", n)
		}
	})

	t.Run("an Ingress moved to another class is left with no status and no route", func(t *testing.T) {
		patch := []byte(`{"spec":{"ingressClassName":"nginx"}}`)
		if _, err := cs.NetworkingV1().Ingresses("default").Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the status cleared", func() (bool, error) {
			got := ingressStatus(t, cs, "web")
			return got == "", fmt.Errorf("status %q", got)
		})
		eventually(t, "a.example unrouted", func() (bool, error) {
			code, body, err := get(plain, httpURL, "a.example")
			return code == http.StatusNotFound, fmt.Errorf("%d %q %v", code, body, err)
		})
		patch = []byte(`{"spec":{"ingressClassName":"edgeplane"}}`)
		if _, err := cs.NetworkingV1().Ingresses("default").Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the status back", func() (bool, error) {
			got := ingressStatus(t, cs, "web")
			return got != "", fmt.Errorf("status %q", got)
		})
	})

	t.Run("a broken backend is an Event on the Ingress", func(t *testing.T) {
		broken := ing("broken", 0, ptr.To(ClassName), map[string][]pathSpec{"x.example": {{"/", "Prefix", "missing"}}})
		broken.UID, broken.CreationTimestamp = "", metav1.Time{}
		create(t, cs.NetworkingV1().Ingresses("default").Create, broken)
		eventually(t, "the Event", func() (bool, error) {
			evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=broken"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == "BadConfig" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "default/missing:80: no such Service") {
					return true, nil
				}
			}
			return false, fmt.Errorf("events %v", evs.Items)
		})
	})

	t.Run("Cleanup removes what it made and leaves the Ingresses", func(t *testing.T) {
		stopCtx, cancelStop := context.WithTimeout(ctx, 10*time.Second)
		defer cancelStop()
		if err := c.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		if err := Cleanup(ctx, cs); err != nil {
			t.Fatal(err)
		}
		if got := ingressStatus(t, cs, "web"); got != "" {
			t.Errorf("status after Cleanup: %q", got)
		}
		sl, err := cs.DiscoveryV1().EndpointSlices(ServiceNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + managedBy})
		if err != nil || len(sl.Items) != 0 {
			t.Errorf("EndpointSlices after Cleanup: %v %v", sl, err)
		}
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, RoleName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole after Cleanup: %v", err)
		}
		if _, err := cs.NetworkingV1().Ingresses("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
			t.Errorf("the user's Ingress after Cleanup: %v", err)
		}
		if err := Cleanup(ctx, cs); err != nil {
			t.Errorf("Cleanup again: %v", err)
		}
	})
	_ = web
}

// resourceVersions of the objects the controller writes.
func resourceVersions(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ings, err := cs.NetworkingV1().Ingresses("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sls, err := cs.DiscoveryV1().EndpointSlices(ServiceNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, i := range ings.Items {
		fmt.Fprintf(&b, "%s=%s ", i.Name, i.ResourceVersion)
	}
	for _, s := range sls.Items {
		fmt.Fprintf(&b, "%s=%s ", s.Name, s.ResourceVersion)
	}
	return b.String()
}

// TestRBAC: the controller's identity reads what it follows and writes
// Ingress status and its EndpointSlices; it is refused the rest.
func TestRBAC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	admin := srv.Client(t)
	if err := EnsureRBAC(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if err := EnsureRBAC(ctx, admin); err != nil {
		t.Fatalf("EnsureRBAC again: %v", err)
	}
	create(t, admin.NetworkingV1().Ingresses("default").Create, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "s", Port: networkingv1.ServiceBackendPort{Number: 80}}}}})
	c, err := Client(srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	slice := func(ns string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}, AddressType: discoveryv1.AddressTypeIPv4}
	}
	tests := []struct {
		name    string
		do      func() error
		allowed bool
	}{
		{"list Ingresses", func() error { _, err := c.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{}); return err }, true},
		{"list TLS Secrets", func() error {
			_, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "type=kubernetes.io/tls"})
			return err
		}, true},
		{"patch an Ingress's status", func() error {
			return patchLB(ctx, c.NetworkingV1().Ingresses("default"), "x", []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.1"}})
		}, true},
		{"create its EndpointSlice in kube-system", func() error {
			_, err := c.DiscoveryV1().EndpointSlices(ServiceNamespace).Create(ctx, slice(ServiceNamespace), metav1.CreateOptions{})
			return err
		}, true},
		{"change an Ingress's spec", func() error {
			_, err := c.NetworkingV1().Ingresses("default").Patch(ctx, "x", types.MergePatchType, []byte(`{"spec":{"ingressClassName":"other"}}`), metav1.PatchOptions{})
			return err
		}, false},
		{"delete an Ingress", func() error { return c.NetworkingV1().Ingresses("default").Delete(ctx, "x", metav1.DeleteOptions{}) }, false},
		{"create a Secret", func() error {
			_, err := c.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
			return err
		}, false},
		{"read ConfigMaps", func() error { _, err := c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); return err }, false},
		{"create an EndpointSlice elsewhere", func() error {
			_, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, slice("default"), metav1.CreateOptions{})
			return err
		}, false},
		{"change a Service", func() error {
			_, err := c.CoreV1().Services(ServiceNamespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		}, false},
		{"read Pods", func() error { _, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); return err }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			switch {
			case tt.allowed && err != nil:
				t.Errorf("refused: %v", err)
			case !tt.allowed && !apierrors.IsForbidden(err):
				t.Errorf("got %v, want Forbidden", err)
			}
		})
	}
}

// TestPortInUse: a port another program holds (a web server on the host)
// does not stop the controller; it takes the port once it is free.
func TestPortInUse(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	if err := EnsureRBAC(ctx, srv.Client(t)); err != nil {
		t.Fatal(err)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	c, err := New(Options{Kubeconfig: srv.Kubeconfig, NodeName: "n1", NodeIPs: []net.IP{net.ParseIP("192.0.2.1")},
		HTTPAddress: held.Addr().String(), HTTPSAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("Ready with a port held by another program: %v", err)
	}
	if h, _ := c.Addresses(); h != nil {
		t.Fatalf("bound %s, which another listener holds", h)
	}
	_ = held.Close()
	eventually(t, "the port taken once free", func() (bool, error) {
		h, _ := c.Addresses()
		return h != nil && h.String() == held.Addr().String(), fmt.Errorf("bound %v", h)
	})
}

// TestCertCachePrune: the parsed certificate of a Secret no build uses any
// more (its Ingress or the Secret deleted) is forgotten at the next prune.
func TestCertCachePrune(t *testing.T) {
	crt, key := selfSignedPEM(t, "a.example")
	secret := func(uid string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: "1"},
			Data: map[string][]byte{"tls.crt": crt, "tls.key": key}}
	}
	var cc certCache
	for _, uid := range []string{"a", "b"} {
		if _, err := cc.get(secret(uid)); err != nil {
			t.Fatal(err)
		}
	}
	cc.prune() // both used by this build
	if _, err := cc.get(secret("a")); err != nil {
		t.Fatal(err)
	}
	cc.prune() // "b" unused since the last prune
	if _, ok := cc.m["b"]; ok || len(cc.m) != 1 {
		t.Fatalf("after a build without Secret b the cache holds %d entries (b: %v), want only a", len(cc.m), ok)
	}
}

// TestStopDrain: a request in flight (a long poll) holds a stop for the
// drain time at most, then its connection is closed.
func TestStopDrain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	p, err := NewProxy(klog.FromContext(ctx), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := newListener("http", "127.0.0.1:0", p, klog.FromContext(ctx), func(int32) {})
	var once sync.Once
	l.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(entered) })
		<-release
	})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan struct{})
	go func() { defer close(served); l.run(runCtx) }()
	eventually(t, "the listener bound", func() (bool, error) { return l.Addr() != nil, nil })
	reqErr := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + l.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		reqErr <- err
	}()
	<-entered
	stopCtx, stopCancel := context.WithTimeout(ctx, time.Minute)
	defer stopCancel()
	began := time.Now()
	if err := l.shutdown(stopCtx); err != nil {
		t.Fatalf("shutdown with a request in flight: %v", err)
	}
	if d := time.Since(began); d > drainTimeout+5*time.Second {
		t.Fatalf("shutdown took %v with a request in flight, want about %v", d, drainTimeout)
	}
	if err := <-reqErr; err == nil {
		t.Fatal("the request in flight got an answer; want its connection closed")
	}
	<-served
}
