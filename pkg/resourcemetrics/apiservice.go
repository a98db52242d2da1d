package resourcemetrics

import (
	"context"
	"fmt"
	"maps"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
	"k8s.io/metrics/pkg/apis/metrics"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
)

// The objects the part keeps, under the names upstream metrics-server's
// manifests (and k3s's) give them, so that a user's manifests and RBAC
// that name them keep working.
const (
	// APIServiceName is the APIService of metrics.k8s.io/v1beta1.
	APIServiceName = "v1beta1.metrics.k8s.io"
	// ReaderRoleName is the ClusterRole that gives the view, edit and admin
	// roles read access to the figures (aggregated into them).
	ReaderRoleName = "system:aggregated-metrics-reader"
)

// managedBy marks the objects as edgeplane's: only those are updated or
// removed. An APIService of the same name without it is the user's (their
// own metrics-server): it is left alone, and serves metrics.k8s.io instead.
var managedBy = map[string]string{"app.kubernetes.io/managed-by": "edgeplane"}

func ours(l map[string]string) bool {
	return l["app.kubernetes.io/managed-by"] == managedBy["app.kubernetes.io/managed-by"]
}

// apiService is the local APIService (no service: the aggregator hands
// requests to the kube-apiserver in this process), with metrics-server's
// priorities.
func apiService() *apiregv1.APIService {
	return &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: APIServiceName, Labels: maps.Clone(managedBy)},
		Spec: apiregv1.APIServiceSpec{
			Group:                metrics.GroupName,
			Version:              metricsv1beta1.SchemeGroupVersion.Version,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}
}

// readerRole is metrics-server's aggregated reader role.
func readerRole() *rbacv1.ClusterRole {
	l := maps.Clone(managedBy)
	for _, r := range []string{"view", "edit", "admin"} {
		l["rbac.authorization.k8s.io/aggregate-to-"+r] = "true"
	}
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ReaderRoleName, Labels: l},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{metrics.GroupName},
			Resources: []string{"pods", "nodes"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
}

// apiregistrationClient is an apiregistration.k8s.io client of the
// kubeconfig at path.
func apiregistrationClient(path string) (apiregclient.ApiregistrationV1Interface, error) {
	cfg, err := kubeclient.Config(path, Name, kubeclient.Steady)
	if err != nil {
		return nil, err
	}
	c, err := apiregclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return c, nil
}

// Ensure creates the APIService and the reader ClusterRole, or brings
// edgeplane's back to what they should be; objects of those names that are
// not edgeplane's are left as they are.
func Ensure(ctx context.Context, client kubernetes.Interface, reg apiregclient.ApiregistrationV1Interface) error {
	logger := klog.FromContext(ctx)
	want := apiService()
	cur, err := reg.APIServices().Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := reg.APIServices().Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return err
		}
	case err != nil:
		return err
	case !ours(cur.Labels):
		served := "this server (a local APIService)"
		if s := cur.Spec.Service; s != nil {
			served = "Service " + s.Namespace + "/" + s.Name
		}
		logger.Info("The APIService "+want.Name+" is not edgeplane's: leaving it as it is; metrics.k8s.io is served by "+served+
			" (--disable="+Name+" stops edgeplane's own scraping)", "labels", cur.Labels)
	case !equality.Semantic.DeepEqual(cur.Spec, want.Spec):
		cur.Spec = want.Spec
		if _, err := reg.APIServices().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	role := readerRole()
	curRole, err := client.RbacV1().ClusterRoles().Get(ctx, role.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	case !ours(curRole.Labels):
		return nil
	case !equality.Semantic.DeepEqual(curRole.Rules, role.Rules) || !equality.Semantic.DeepEqual(curRole.Labels, role.Labels):
		curRole.Rules, curRole.Labels = role.Rules, role.Labels
		_, err = client.RbacV1().ClusterRoles().Update(ctx, curRole, metav1.UpdateOptions{})
		return err
	}
	return nil
}

// Remove deletes edgeplane's APIService and reader ClusterRole (the
// --disable path); objects of those names that are not edgeplane's stay.
func Remove(ctx context.Context, client kubernetes.Interface, reg apiregclient.ApiregistrationV1Interface) error {
	cur, err := reg.APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
	if err == nil && ours(cur.Labels) {
		err = reg.APIServices().Delete(ctx, APIServiceName, deleteExactly(cur.UID))
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	role, err := client.RbacV1().ClusterRoles().Get(ctx, ReaderRoleName, metav1.GetOptions{})
	if err == nil && ours(role.Labels) {
		err = client.RbacV1().ClusterRoles().Delete(ctx, ReaderRoleName, deleteExactly(role.UID))
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// RemoveWith is Remove with clients of the kubeconfig at path, retried
// for up to window while the API server is starting.
func RemoveWith(ctx context.Context, path string, window time.Duration) error {
	client, err := kubeclient.New(path, Name, kubeclient.Steady)
	if err != nil {
		return err
	}
	reg, err := apiregistrationClient(path)
	if err != nil {
		return err
	}
	return kubeclient.Retry(ctx, "removing the metrics.k8s.io APIService (--disable="+Name+")", window, func(ctx context.Context) error {
		return Remove(ctx, client, reg)
	})
}

// deleteExactly deletes the object of uid only: one made again meanwhile
// (by the user, say) stays.
func deleteExactly(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
}
