package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/pkg/ingress"
)

// preIngressCommit is main's last commit before the Ingress controller: its
// binary makes clusters with no IngressClass.
const preIngressCommit = "9930670"

// userIngress is the user's Ingress, made before the upgrade: no class
// (there was none), two hosts to two Services.
const userIngress = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: two-hosts
  namespace: default
  labels: {owner: user}
  annotations: {note: made before the upgrade}
spec:
  rules:
  - host: a.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web-a, port: {number: 80}}}}
  - host: b.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web-b, port: {number: 80}}}}
`

// k3sIngress is what a k3s user's manifest says: class traefik, TLS.
const k3sIngress = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: from-k3s
  namespace: default
spec:
  ingressClassName: traefik
  tls:
  - {hosts: [tls.example], secretName: tls-example}
  rules:
  - host: tls.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web-b, port: {number: 80}}}}
`

// TestIngress: a cluster made by the binary from before the Ingress
// controller (a server that is its own node and an agent, each in its
// network namespace with its own containerd), with two web pods on the
// agent, their Services and an Ingress for two hosts. Restarted with this
// binary, the server gets the IngressClass, the Service and the proxy with
// no change to the user's Ingress: from the host (outside the cluster
// network), either node's address answers each host with its pod on port
// 80, and port 443 with the Ingress's TLS Secret for a k3s-style Ingress
// of class traefik; the Ingress's status names both nodes. Restarted with
// --disable=ingress, what the controller made is gone, the port is closed,
// and the user's Ingress stays.
func TestIngress(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an older edgeplane, runs containerd, a server node and an agent node in network namespaces")
	}
	var old string
	parallelNode(t, buildClusterImages(t), func() { old = buildAt(t, preIngressCommit) })
	c := startTwoNodeCluster(t, twoNodeOptions{Bin: old})
	s := c.Server

	for _, name := range []string{"web-a", "web-b"} {
		c.runPod(t, name, c.AgentNode, webScript(name), nil)
		if out, err := s.kubectl("expose", "pod", name, "--port=80", "--target-port=8080"); err != nil {
			t.Fatalf("kubectl expose: %v\n%s", err, out)
		}
	}
	if out, err := s.kubectlStdin(userIngress, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	before := userView(t, s)

	restart := func(extra ...string) {
		t.Helper()
		s.stop()
		s = startServerCmd(t, s.dataDir, nsenterCmd(c.ServerNS, append(append([]string{}, c.serverArgs...), extra...)...))
		s.useAddress(t, serverURL(c.Server))
		s.mustKeepRunning(t)
		c.Server = s
		waitNodeReady(t, s, c.ServerNode)
	}
	restart()

	t.Run("the upgraded cluster has the default IngressClass and the Service", func(t *testing.T) {
		eventually(t, 2*time.Minute, "IngressClass edgeplane, default", func(ctx context.Context) (bool, error) {
			ic, err := s.client.NetworkingV1().IngressClasses().Get(ctx, ingress.ClassName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return ic.Spec.Controller == ingress.ControllerName && ic.Annotations[ingress.DefaultClassAnnotation] == "true", fmt.Errorf("%+v", ic)
		})
		eventually(t, 2*time.Minute, "the Service's load balancer addresses", func(ctx context.Context) (bool, error) {
			svc, err := s.client.CoreV1().Services(ingress.ServiceNamespace).Get(ctx, ingress.ServiceName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got := fmt.Sprint(svc.Status.LoadBalancer.Ingress)
			return strings.Contains(got, c.ServerIP) && strings.Contains(got, c.AgentIP), fmt.Errorf("ingress %s", got)
		})
	})

	t.Run("each host answers from outside the cluster network on either node", func(t *testing.T) {
		for _, ip := range []string{c.AgentIP, c.ServerIP} {
			for host, want := range map[string]string{"a.example": "web-a", "b.example": "web-b"} {
				url := "http://" + ip + "/"
				eventually(t, 2*time.Minute, host+" at "+url, func(ctx context.Context) (bool, error) {
					code, body, err := hostRequest(ctx, nil, url, host)
					return err == nil && code == 200 && body == want, fmt.Errorf("%d %q %v", code, body, err)
				})
			}
			if code, body, err := hostRequest(context.Background(), nil, "http://"+ip+"/", "unknown.example"); err != nil || code != http.StatusNotFound {
				t.Errorf("an unknown host at %s: %d %q %v, want 404", ip, code, body, err)
			}
		}
	})

	t.Run("the user's Ingress is unchanged but for its status", func(t *testing.T) {
		if after := userView(t, s); after != before {
			t.Errorf("the upgrade changed the user's Ingress:\nbefore %s\nafter  %s", before, after)
		}
		eventually(t, time.Minute, "the Ingress's status", func(ctx context.Context) (bool, error) {
			ing, err := s.client.NetworkingV1().Ingresses("default").Get(ctx, "two-hosts", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got := fmt.Sprint(ing.Status.LoadBalancer.Ingress)
			return strings.Contains(got, c.ServerIP) && strings.Contains(got, c.AgentIP), fmt.Errorf("status %s", got)
		})
	})

	t.Run("a k3s Ingress of class traefik with TLS answers on 443", func(t *testing.T) {
		crtPEM, keyPEM := ingressCert(t, "tls.example")
		dir := t.TempDir()
		crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		if err := os.WriteFile(crt, crtPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := s.kubectl("create", "secret", "tls", "tls-example", "--cert", crt, "--key", key); err != nil {
			t.Fatalf("kubectl create secret tls: %v\n%s", err, out)
		}
		if out, err := s.kubectlStdin(k3sIngress, "apply", "-f", "-"); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(crtPEM)
		tlsConf := &tls.Config{RootCAs: pool, ServerName: "tls.example", MinVersion: tls.VersionTLS12}
		for _, ip := range []string{c.AgentIP, c.ServerIP} {
			url := "https://" + ip + "/"
			eventually(t, 2*time.Minute, "tls.example at "+url, func(ctx context.Context) (bool, error) {
				code, body, err := hostRequest(ctx, tlsConf, url, "tls.example")
				return err == nil && code == 200 && body == "web-b", fmt.Errorf("%d %q %v", code, body, err)
			})
		}
	})

	restart("--disable=ingress")

	t.Run("--disable=ingress removes what it made and keeps the user's Ingresses", func(t *testing.T) {
		eventually(t, 2*time.Minute, "the IngressClass, Service, EndpointSlices, roles and status gone", func(ctx context.Context) (bool, error) {
			if _, err := s.client.NetworkingV1().IngressClasses().Get(ctx, ingress.ClassName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("IngressClass: %v", err)
			}
			if _, err := s.client.CoreV1().Services(ingress.ServiceNamespace).Get(ctx, ingress.ServiceName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("Service: %v", err)
			}
			sl, err := s.client.DiscoveryV1().EndpointSlices(ingress.ServiceNamespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + ingress.ServiceName})
			if err != nil || len(sl.Items) > 0 {
				return false, fmt.Errorf("EndpointSlices: %d, %v", len(sl.Items), err)
			}
			if _, err := s.client.RbacV1().ClusterRoles().Get(ctx, ingress.RoleName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("ClusterRole: %v", err)
			}
			for _, name := range []string{"two-hosts", "from-k3s"} {
				ing, err := s.client.NetworkingV1().Ingresses("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, fmt.Errorf("the user's Ingress %s: %v", name, err)
				}
				if len(ing.Status.LoadBalancer.Ingress) > 0 {
					return false, fmt.Errorf("Ingress %s keeps the status %v", name, ing.Status.LoadBalancer.Ingress)
				}
			}
			return true, nil
		})
		if _, err := os.Stat(filepath.Join(s.dataDir, "manifests", "ingress.yaml")); !os.IsNotExist(err) {
			t.Errorf("manifests/ingress.yaml after --disable=ingress: %v", err)
		}
		_, _, err := hostRequest(context.Background(), nil, "http://"+c.ServerIP+"/", "a.example")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("port 80 of the server's node with --disable=ingress: %v, want connection refused", err)
		}
		if after := userView(t, s); after != before {
			t.Errorf("--disable=ingress changed the user's Ingress:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// userView is what the user wrote of the Ingress two-hosts: its generation,
// labels, annotations (kubectl's copy aside) and spec.
func userView(t *testing.T, s *server) string {
	t.Helper()
	ing, err := s.client.NetworkingV1().Ingresses("default").Get(context.Background(), "two-hosts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal([]any{ing.Generation, ing.Labels, ing.Annotations, ing.Spec})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostRequest GETs url from the host with the Host header (and SNI) host,
// over TLS with tlsConf when not nil.
func hostRequest(ctx context.Context, tlsConf *tls.Config, url, host string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, DisableKeepAlives: true,
		DialContext: (&net.Dialer{Timeout: 3 * time.Second}).DialContext}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// ingressCert is a self-signed certificate and key for host.
func ingressCert(t *testing.T, host string) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
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
