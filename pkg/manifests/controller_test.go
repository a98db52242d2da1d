package manifests

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
)

// waitFor polls cond every 50 ms for up to 30 s.
func waitFor(t *testing.T, ctx context.Context, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// startController starts a controller on dir and stops it when t ends.
func startController(t *testing.T, ctx context.Context, o Options) *Controller {
	t.Helper()
	c, err := New(o)
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
	return c
}

// waitChecks waits until c has completed n more checks than now.
func waitChecks(t *testing.T, ctx context.Context, c *Controller, n int) {
	t.Helper()
	target := c.Checks() + n
	waitFor(t, ctx, fmt.Sprintf("%d checks", n), func(context.Context) (bool, error) {
		c.Trigger()
		return c.Checks() >= target, nil
	})
}

func configMapExists(cs kubernetes.Interface, ns, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
}

func configMapGone(cs kubernetes.Interface, ns, name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		ok, err := configMapExists(cs, ns, name)(ctx)
		return !ok && err == nil, nil
	}
}

const userManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: user-ns
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: user-cm
  namespace: user-ns
data:
  k: v1
---
apiVersion: example.edgeplane.io/v1
kind: Widget
metadata:
  name: w1
  namespace: user-ns
spec:
  size: 3
`

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.edgeplane.io
spec:
  group: example.edgeplane.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// TestController runs the controller against the real API server chain:
// the packaged CoreDNS manifest applied, an idle check writing nothing, a
// deleted object restored, a user manifest with a kind whose CRD comes
// later, a changed and a removed file, and --disable=coredns.
func TestController(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	srv := testapiserver.Start(t, ctx)
	cs := srv.Client(t)
	dir := filepath.Join(t.TempDir(), "manifests")
	_, serviceCIDR, _ := net.ParseCIDR(testapiserver.ServiceCIDR)
	dnsIP, err := DNSServiceIP(serviceCIDR)
	if err != nil {
		t.Fatal(err)
	}
	packaged, err := Packaged(Values{ClusterDNS: dnsIP, ClusterDomain: "cluster.local", CoreDNSImage: DefaultCoreDNSImage})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Dir: dir, Kubeconfig: srv.Kubeconfig, Packaged: packaged, Interval: 100 * time.Millisecond}
	c := startController(t, ctx, opts)

	t.Run("packaged CoreDNS applied", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(dir, "coredns.yaml")); err != nil {
			t.Fatalf("packaged file not written: %v", err)
		}
		waitFor(t, ctx, "the kube-dns Service", func(ctx context.Context) (bool, error) {
			svc, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if svc.Spec.ClusterIP != "10.43.0.10" {
				return false, fmt.Errorf("kube-dns ClusterIP %s, want 10.43.0.10", svc.Spec.ClusterIP)
			}
			return true, nil
		})
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Annotations[AnnotationSource]; got != "coredns.yaml" {
			t.Errorf("annotation %s = %q, want coredns.yaml", AnnotationSource, got)
		}
		managers := map[string]bool{}
		for _, mf := range d.ManagedFields {
			managers[mf.Manager+"/"+string(mf.Operation)] = true
		}
		if !managers[FieldManager+"/Apply"] {
			t.Errorf("managed fields %v lack %s/Apply", managers, FieldManager)
		}
		cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(cm.Data["Corefile"], "kubernetes cluster.local in-addr.arpa ip6.arpa") {
			t.Errorf("Corefile:\n%s", cm.Data["Corefile"])
		}
	})

	t.Run("idle checks write nothing", func(t *testing.T) {
		before := resourceVersions(t, ctx, cs)
		waitChecks(t, ctx, c, 10)
		after := resourceVersions(t, ctx, cs)
		if before != after {
			t.Errorf("resourceVersions changed while idle:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("deleted object restored", func(t *testing.T) {
		if err := cs.CoreV1().ConfigMaps("kube-system").Delete(ctx, "coredns", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the coredns ConfigMap to come back", configMapExists(cs, "kube-system", "coredns"))
	})

	t.Run("user manifest, kind known later", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, "user.yaml"), []byte(userManifest), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the user's ConfigMap", configMapExists(cs, "user-ns", "user-cm"))
		waitChecks(t, ctx, c, 2)
		c.mu.Lock()
		pending := c.files["user.yaml"].pending
		c.mu.Unlock()
		if !pending {
			t.Fatal("a Widget without its CRD should leave user.yaml pending")
		}
		if err := os.WriteFile(filepath.Join(dir, "widget-crd.yaml"), []byte(widgetCRD), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "user.yaml complete once the CRD is there", func(context.Context) (bool, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			st := c.files["user.yaml"]
			return st != nil && !st.pending && len(st.objects) == 3, nil
		})
	})

	t.Run("changed file re-applied and pruned", func(t *testing.T) {
		changed := strings.Replace(userManifest, "k: v1", "k: v2", 1)
		changed = changed[:strings.LastIndex(changed, "---")] // the Widget leaves the file
		if err := os.WriteFile(filepath.Join(dir, "user.yaml"), []byte(changed), 0o600); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the changed ConfigMap and the Widget gone", func(ctx context.Context) (bool, error) {
			cm, err := cs.CoreV1().ConfigMaps("user-ns").Get(ctx, "user-cm", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c.mu.Lock()
			n := len(c.files["user.yaml"].objects)
			c.mu.Unlock()
			return cm.Data["k"] == "v2" && n == 2, nil
		})
	})

	t.Run("removed file deletes its objects", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "user.yaml")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the user's ConfigMap deleted", configMapGone(cs, "user-ns", "user-cm"))
	})

	t.Run("disable coredns", func(t *testing.T) {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		disabled := opts
		disabled.Disabled = []string{CoreDNS}
		startController(t, ctx, disabled)
		if _, err := os.Stat(filepath.Join(dir, "coredns.yaml")); !os.IsNotExist(err) {
			t.Errorf("coredns.yaml still there (%v)", err)
		}
		waitFor(t, ctx, "the coredns objects deleted", func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
			_, err = cs.RbacV1().ClusterRoles().Get(ctx, "system:coredns", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{name: "no dir", o: Options{Kubeconfig: "k"}, want: "no directory"},
		{name: "no kubeconfig", o: Options{Dir: "d"}, want: "no kubeconfig"},
		{name: "negative interval", o: Options{Dir: "d", Kubeconfig: "k", Interval: -time.Second}, want: "must not be negative"},
		{name: "unknown disabled", o: Options{Dir: "d", Kubeconfig: "k", Disabled: []string{"traefik"}}, want: `"traefik" is not a packaged manifest`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// resourceVersions lists the packaged objects' resourceVersions.
func resourceVersions(t *testing.T, ctx context.Context, cs kubernetes.Interface) string {
	t.Helper()
	var out []string
	for _, get := range []func() (metav1.Object, error){
		func() (metav1.Object, error) {
			return cs.CoreV1().ServiceAccounts("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return cs.RbacV1().ClusterRoles().Get(ctx, "system:coredns", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return cs.RbacV1().ClusterRoleBindings().Get(ctx, "system:coredns", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return cs.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return cs.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		},
		func() (metav1.Object, error) {
			return cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		},
	} {
		o, err := get()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.GetName()+"="+o.GetResourceVersion())
	}
	return strings.Join(out, " ")
}
