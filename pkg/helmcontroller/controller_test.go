package helmcontroller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"

	"github.com/edgeplane/edgeplane/internal/testing/testapiserver"
	"github.com/edgeplane/edgeplane/internal/testing/testchart"
)

// env is a started API server with the controller running.
type env struct {
	c      *Controller
	client kubernetes.Interface
	dyn    dynamic.Interface
	srv    *testapiserver.Server
}

func startEnv(t *testing.T, ctx context.Context) *env {
	t.Helper()
	srv := testapiserver.Start(t, ctx)
	c, err := New(Options{Kubeconfig: srv.Kubeconfig, RetryBase: 200 * time.Millisecond, RetryMax: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Ready(readyCtx); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, client: srv.Client(t), dyn: dynamic.NewForConfigOrDie(cfg), srv: srv}
}

func helmChart(namespace, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "HelmChart",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     spec,
	}}
}

// apply creates the HelmChart or replaces its spec.
func (e *env) apply(t *testing.T, ctx context.Context, obj *unstructured.Unstructured) {
	t.Helper()
	r := e.dyn.Resource(HelmChartResource).Namespace(obj.GetNamespace())
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = r.Create(ctx, obj, metav1.CreateOptions{})
			return err == nil, err
		}
		if err != nil {
			return false, err
		}
		cur.Object["spec"] = obj.Object["spec"]
		_, err = r.Update(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("apply HelmChart %s: %v", obj.GetName(), err)
	}
}

// waitConfigMap waits until the ConfigMap has data key = want ("" waits
// until it is gone).
func (e *env) waitConfigMap(t *testing.T, ctx context.Context, namespace, name, key, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = "<none>"
			return want == "", nil
		}
		if err != nil {
			return false, err
		}
		last = cm.Data[key]
		return want != "" && last == want, nil
	})
	if err != nil {
		t.Fatalf("ConfigMap %s/%s %s = %q, want %q: %v", namespace, name, key, last, want, err)
	}
}

// waitCondition waits for the HelmChart's condition typ to be status with
// a message containing msg.
func (e *env) waitCondition(t *testing.T, ctx context.Context, namespace, name, typ string, status corev1.ConditionStatus, msg string) Condition {
	t.Helper()
	var got []Condition
	var found Condition
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := e.dyn.Resource(HelmChartResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // polled
		}
		hc := &HelmChart{}
		if err := fromUnstructured(u, hc); err != nil {
			return false, err
		}
		got = hc.Status.Conditions
		if c := condition(got, typ); c != nil && c.Status == status && strings.Contains(c.Message, msg) {
			found = *c
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("HelmChart %s/%s: no condition %s=%s with %q; conditions %+v", namespace, name, typ, status, msg, got)
	}
	return found
}

// waitEvent waits for an event of the HelmChart with reason and a message
// containing msg.
func (e *env) waitEvent(t *testing.T, ctx context.Context, namespace, name, reason, msg string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && strings.Contains(ev.Message, msg) && ev.InvolvedObject.Kind == "HelmChart" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("HelmChart %s/%s: no event %s with %q; events %q", namespace, name, reason, msg, seen)
	}
}

// releaseRecords are the resourceVersions of a release's Secrets.
func (e *env) releaseRecords(t *testing.T, ctx context.Context, namespace, release string) map[string]string {
	t.Helper()
	list, err := e.client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + release})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = s.ResourceVersion + " " + s.Labels["status"]
	}
	return out
}

func (e *env) namespace(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func TestController(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := startEnv(t, ctx)
	e.namespace(t, ctx, "apps")

	t.Run("chartContent installs, valuesContent and HelmChartConfig upgrade, delete uninstalls", func(t *testing.T) {
		content := testchart.Base64(t, "testchart", "0.1.0", testchart.ConfigMapTemplate)
		e.apply(t, ctx, helmChart("kube-system", "greeter", map[string]any{"chartContent": content, "targetNamespace": "apps"}))
		e.waitConfigMap(t, ctx, "apps", "greeter-cm", "greeting", "hello")
		e.waitCondition(t, ctx, "kube-system", "greeter", ConditionDeployed, corev1.ConditionTrue, "release greeter in apps, revision 1")
		e.waitCondition(t, ctx, "kube-system", "greeter", ConditionFailed, corev1.ConditionFalse, "")
		e.waitEvent(t, ctx, "kube-system", "greeter", reasonInstalled, "revision 1 from spec.chartContent")

		e.apply(t, ctx, helmChart("kube-system", "greeter", map[string]any{"chartContent": content, "targetNamespace": "apps", "valuesContent": "greeting: bonjour\n"}))
		e.waitConfigMap(t, ctx, "apps", "greeter-cm", "greeting", "bonjour")
		e.waitCondition(t, ctx, "kube-system", "greeter", ConditionDeployed, corev1.ConditionTrue, "revision 2")
		e.waitEvent(t, ctx, "kube-system", "greeter", reasonUpgraded, "revision 2")

		conf := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiVersion, "kind": "HelmChartConfig",
			"metadata": map[string]any{"name": "greeter", "namespace": "kube-system"},
			"spec":     map[string]any{"valuesContent": "greeting: from-config\n"},
		}}
		confs := e.dyn.Resource(HelmChartConfigResource).Namespace("kube-system")
		if _, err := confs.Create(ctx, conf, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitConfigMap(t, ctx, "apps", "greeter-cm", "greeting", "from-config")
		e.waitCondition(t, ctx, "kube-system", "greeter", ConditionDeployed, corev1.ConditionTrue, "revision 3")
		if err := confs.Delete(ctx, "greeter", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitConfigMap(t, ctx, "apps", "greeter-cm", "greeting", "bonjour")

		if err := e.dyn.Resource(HelmChartResource).Namespace("kube-system").Delete(ctx, "greeter", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitConfigMap(t, ctx, "apps", "greeter-cm", "greeting", "")
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := e.dyn.Resource(HelmChartResource).Namespace("kube-system").Get(ctx, "greeter", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatal("the HelmChart was not removed after its uninstall")
		}
		if recs := e.releaseRecords(t, ctx, "apps", "greeter"); len(recs) != 0 {
			t.Errorf("release records left after uninstall: %v", recs)
		}
	})

	t.Run("an unchanged chart writes nothing", func(t *testing.T) {
		content := testchart.Base64(t, "testchart", "0.1.0", testchart.ConfigMapTemplate)
		e.apply(t, ctx, helmChart("apps", "idle", map[string]any{"chartContent": content, "valuesContent": "greeting: idle\n"}))
		e.waitConfigMap(t, ctx, "apps", "idle-cm", "greeting", "idle")
		e.waitCondition(t, ctx, "apps", "idle", ConditionDeployed, corev1.ConditionTrue, "revision 1")
		e.waitEvent(t, ctx, "apps", "idle", reasonInstalled, "")
		// Let the worker finish the status write's own round.
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return e.c.queue.Len() == 0, nil
		}); err != nil {
			t.Fatal(err)
		}
		u, err := e.dyn.Resource(HelmChartResource).Namespace("apps").Get(ctx, "idle", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm, err := e.client.CoreV1().ConfigMaps("apps").Get(ctx, "idle-cm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		records := e.releaseRecords(t, ctx, "apps", "idle")
		for range 5 {
			if err := e.c.sync(ctx, "apps/idle"); err != nil {
				t.Fatal(err)
			}
		}
		u2, err := e.dyn.Resource(HelmChartResource).Namespace("apps").Get(ctx, "idle", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm2, err := e.client.CoreV1().ConfigMaps("apps").Get(ctx, "idle-cm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u.GetResourceVersion() != u2.GetResourceVersion() || cm.ResourceVersion != cm2.ResourceVersion {
			t.Errorf("checks of an unchanged chart wrote: HelmChart %s -> %s, ConfigMap %s -> %s",
				u.GetResourceVersion(), u2.GetResourceVersion(), cm.ResourceVersion, cm2.ResourceVersion)
		}
		if got := e.releaseRecords(t, ctx, "apps", "idle"); fmt.Sprint(got) != fmt.Sprint(records) {
			t.Errorf("release records changed: %v -> %v", records, got)
		}
	})

	t.Run("a broken chart reports its error, and a fixed one installs", func(t *testing.T) {
		broken := testchart.Base64(t, "testchart", "0.1.0", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }-cm\n")
		e.apply(t, ctx, helmChart("apps", "broken", map[string]any{"chartContent": broken}))
		cond := e.waitCondition(t, ctx, "apps", "broken", ConditionFailed, corev1.ConditionTrue, "parse error")
		if cond.Reason != reasonInstallFailed || !strings.Contains(cond.Message, "templates/configmap.yaml") {
			t.Errorf("Failed condition %+v: want reason %s naming the template", cond, reasonInstallFailed)
		}
		e.waitEvent(t, ctx, "apps", "broken", reasonInstallFailed, "parse error")

		e.apply(t, ctx, helmChart("apps", "broken", map[string]any{"chartContent": "not base64!"}))
		e.waitCondition(t, ctx, "apps", "broken", ConditionFailed, corev1.ConditionTrue, "spec.chartContent is not base64")
		e.waitEvent(t, ctx, "apps", "broken", reasonChartFailed, "spec.chartContent is not base64")

		e.apply(t, ctx, helmChart("apps", "broken", map[string]any{"chartContent": testchart.Base64(t, "testchart", "0.1.0", testchart.ConfigMapTemplate)}))
		e.waitConfigMap(t, ctx, "apps", "broken-cm", "greeting", "hello")
		e.waitCondition(t, ctx, "apps", "broken", ConditionFailed, corev1.ConditionFalse, "")
	})

	t.Run("a release left pending by a stopped server is upgraded again", func(t *testing.T) {
		// A server stopped (a power cut) during an upgrade leaves the
		// newest release record pending-upgrade; helm refuses to upgrade
		// it ("another operation is in progress") until it is marked failed.
		content := testchart.Base64(t, "testchart", "0.1.0", testchart.ConfigMapTemplate)
		spec := map[string]any{"chartContent": content, "failurePolicy": "retry", "valuesContent": "greeting: before\n"}
		e.apply(t, ctx, helmChart("apps", "pending", spec))
		e.waitConfigMap(t, ctx, "apps", "pending-cm", "greeting", "before")
		e.waitCondition(t, ctx, "apps", "pending", ConditionDeployed, corev1.ConditionTrue, "revision 1")

		op := &operation{getter: e.c.getter, plan: &plan{Release: "pending", Namespace: "apps", Driver: "secret"}, logger: klog.FromContext(ctx)}
		cfg, err := op.config()
		if err != nil {
			t.Fatal(err)
		}
		r, err := cfg.Releases.Get("pending", 1)
		if err != nil {
			t.Fatal(err)
		}
		interrupted := *r.(*release.Release)
		interrupted.Version = 2
		interrupted.Info = &release.Info{Status: common.StatusPendingUpgrade}
		if err := cfg.Releases.Create(&interrupted); err != nil {
			t.Fatal(err)
		}

		spec["valuesContent"] = "greeting: after\n"
		e.apply(t, ctx, helmChart("apps", "pending", spec))
		// The controller may take the pending record up before the change
		// (at the sync its own status write causes): revision 3 or 4.
		e.waitConfigMap(t, ctx, "apps", "pending-cm", "greeting", "after")
		e.waitCondition(t, ctx, "apps", "pending", ConditionFailed, corev1.ConditionFalse, "")
		if got := e.releaseRecords(t, ctx, "apps", "pending"); !strings.HasSuffix(got["sh.helm.release.v1.pending.v2"], " failed") {
			t.Errorf("the interrupted revision 2 is %q, want failed", got["sh.helm.release.v1.pending.v2"])
		}
	})

	t.Run("failurePolicy abort leaves a failed release alone and says so", func(t *testing.T) {
		// The API server refuses the object (an invalid name): the install
		// leaves a failed release record.
		content := testchart.Base64(t, "testchart", "0.1.0", strings.Replace(testchart.ConfigMapTemplate, "{{ .Release.Name }}-cm", "{{ .Values.name }}", 1))
		e.apply(t, ctx, helmChart("apps", "abort", map[string]any{"chartContent": content, "failurePolicy": "abort", "valuesContent": "name: Not_A_Name\n"}))
		cond := e.waitCondition(t, ctx, "apps", "abort", ConditionFailed, corev1.ConditionTrue, "failurePolicy is abort")
		if cond.Reason != reasonAborted || !strings.Contains(cond.Message, "release abort in apps is failed") {
			t.Errorf("Failed condition %+v: want reason %s naming the release", cond, reasonAborted)
		}
		e.waitEvent(t, ctx, "apps", "abort", reasonAborted, "fix it with helm")
	})

	t.Run("bad values name their source", func(t *testing.T) {
		content := testchart.Base64(t, "testchart", "0.1.0", testchart.ConfigMapTemplate)
		e.apply(t, ctx, helmChart("apps", "badvalues", map[string]any{"chartContent": content, "valuesContent": "- a list\n- not a map\n"}))
		cond := e.waitCondition(t, ctx, "apps", "badvalues", ConditionFailed, corev1.ConditionTrue, "spec.valuesContent is not a YAML map")
		if cond.Reason != reasonValuesFailed {
			t.Errorf("reason %q, want %q", cond.Reason, reasonValuesFailed)
		}
		e.apply(t, ctx, helmChart("apps", "badvalues", map[string]any{"chartContent": content, "valuesSecrets": []any{map[string]any{"name": "missing", "keys": []any{"values.yaml"}}}}))
		e.waitCondition(t, ctx, "apps", "badvalues", ConditionFailed, corev1.ConditionTrue, `Secret apps/missing`)
		if _, err := e.client.CoreV1().Secrets("apps").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "missing"}, StringData: map[string]string{"values.yaml": "greeting: secret\n"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitConfigMap(t, ctx, "apps", "badvalues-cm", "greeting", "secret") // retried with back-off
	})

	t.Run("a chart from a repository", func(t *testing.T) {
		v1 := testchart.Archive(t, "repochart", "0.1.0", testchart.ConfigMapTemplate)
		v2 := testchart.Archive(t, "repochart", "0.2.0", testchart.ConfigMapTemplate)
		mux := http.NewServeMux()
		mux.HandleFunc("/charts/index.yaml", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, `apiVersion: v1
entries:
  repochart:
  - {apiVersion: v2, name: repochart, version: 0.2.0, urls: [repochart-0.2.0.tgz]}
  - {apiVersion: v2, name: repochart, version: 0.1.0, urls: [repochart-0.1.0.tgz]}
`)
		})
		mux.HandleFunc("/charts/repochart-0.1.0.tgz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(v1) })
		mux.HandleFunc("/charts/repochart-0.2.0.tgz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(v2) })
		repo := httptest.NewServer(mux)
		defer repo.Close()

		e.apply(t, ctx, helmChart("apps", "fromrepo", map[string]any{"repo": repo.URL + "/charts", "chart": "repochart", "version": "0.1.0"}))
		e.waitConfigMap(t, ctx, "apps", "fromrepo-cm", "chartVersion", "0.1.0")
		e.waitEvent(t, ctx, "apps", "fromrepo", reasonInstalled, "repochart version 0.1.0 from "+repo.URL)
		e.apply(t, ctx, helmChart("apps", "fromrepo", map[string]any{"repo": repo.URL + "/charts", "chart": "repochart"}))
		e.waitConfigMap(t, ctx, "apps", "fromrepo-cm", "chartVersion", "0.2.0")

		e.apply(t, ctx, helmChart("apps", "fromurl", map[string]any{"chart": repo.URL + "/charts/repochart-0.1.0.tgz"}))
		e.waitConfigMap(t, ctx, "apps", "fromurl-cm", "chartVersion", "0.1.0")

		e.apply(t, ctx, helmChart("apps", "norepochart", map[string]any{"repo": repo.URL + "/charts", "chart": "nosuchchart"}))
		e.waitCondition(t, ctx, "apps", "norepochart", ConditionFailed, corev1.ConditionTrue, `chart "nosuchchart"`)
		e.waitEvent(t, ctx, "apps", "norepochart", reasonChartFailed, "nosuchchart")
	})

	t.Run("job fields are reported as not used, other helm versions refused", func(t *testing.T) {
		content := testchart.Base64(t, "testchart", "0.1.0", testchart.ConfigMapTemplate)
		e.apply(t, ctx, helmChart("apps", "jobfields", map[string]any{"chartContent": content, "jobImage": "rancher/klipper-helm:v0.9.3", "backOffLimit": int64(3)}))
		e.waitConfigMap(t, ctx, "apps", "jobfields-cm", "greeting", "hello")
		e.waitEvent(t, ctx, "apps", "jobfields", reasonNotUsed, "spec.jobImage, spec.backOffLimit not used")

		e.apply(t, ctx, helmChart("apps", "helmv2", map[string]any{"chartContent": content, "helmVersion": "v2"}))
		cond := e.waitCondition(t, ctx, "apps", "helmv2", ConditionFailed, corev1.ConditionTrue, `spec.helmVersion "v2" is not supported`)
		if cond.Reason != reasonUnsupported {
			t.Errorf("reason %q, want %q", cond.Reason, reasonUnsupported)
		}
	})

	t.Run("a namespace admin may not create HelmCharts", func(t *testing.T) {
		// A chart creates any object, as cluster-admin: only those who are
		// may create one. The admin ClusterRole of a namespace grants no
		// HelmChart (it aggregates no helm.cattle.io rule). The
		// controller-manager's aggregation fills the admin role, as in a
		// cluster.
		factory := informers.NewSharedInformerFactory(e.client, 0)
		agg := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), e.client.RbacV1())
		aggCtx, stopAgg := context.WithCancel(ctx)
		factory.Start(aggCtx.Done())
		defer func() { stopAgg(); factory.Shutdown() }()
		go agg.Run(aggCtx, 1)
		if _, err := e.client.RbacV1().RoleBindings("apps").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-admin"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			resource string
			verb     string
			allowed  bool
		}{
			{"configmaps", "create", true}, // the binding works
			{"helmcharts", "create", false},
			{"helmcharts", "update", false},
			{"helmchartconfigs", "create", false},
		} {
			group := Group
			if tc.resource == "configmaps" {
				group = ""
			}
			var allowed bool
			// The aggregation is asynchronous: poll the allowed case.
			_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				review, err := e.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: "alice", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "apps", Verb: tc.verb, Group: group, Resource: tc.resource},
				}}, metav1.CreateOptions{})
				if err != nil {
					return false, err
				}
				allowed = review.Status.Allowed
				return allowed || !tc.allowed, nil
			})
			if allowed != tc.allowed {
				t.Errorf("namespace admin %s %s: allowed %v, want %v", tc.verb, tc.resource, allowed, tc.allowed)
			}
		}
	})
}
