package join

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

const ns = metav1.NamespaceSystem

// PublishForJoin makes the cluster joinable through this server's API: a
// bootstrap token derived from the join token, read access for it to the
// edgeplane-bootstrap Secret only, and that Secret with the sealed bootstrap
// data and etcdURL added to the etcd client URLs. Every server calls it at
// start, so any of them can be the --server of a new one.
func PublishForJoin(ctx context.Context, cs kubernetes.Interface, secret string, sealed []byte, etcdURL string) error {
	id, tokenSecret := BootstrapToken(secret)
	tok := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: ns},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"description":                    "edgeplane: servers joining with --server and --token",
			"token-id":                       id,
			"token-secret":                   tokenSecret,
			"usage-bootstrap-authentication": "true",
			"auth-extra-groups":              ServersGroup,
		},
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "edgeplane:server-join", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{SecretName}, Verbs: []string{"get"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "edgeplane:server-join", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: ServersGroup}},
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, tok, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the join bootstrap token: %w", err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the join role: %w", err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the join role binding: %w", err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cs.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns},
				Data:       map[string][]byte{keySealed: sealed, keyEtcdEndpoints: []byte(etcdURL)},
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("secrets"), SecretName, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		urls := splitURLs(string(cur.Data[keyEtcdEndpoints]))
		if slices.Contains(urls, etcdURL) && len(cur.Data[keySealed]) > 0 {
			return nil
		}
		if !slices.Contains(urls, etcdURL) {
			urls = append(urls, etcdURL)
		}
		if cur.Data == nil {
			cur.Data = map[string][]byte{}
		}
		if len(cur.Data[keySealed]) == 0 {
			cur.Data[keySealed] = sealed
		}
		cur.Data[keyEtcdEndpoints] = []byte(strings.Join(urls, ","))
		_, err = cs.CoreV1().Secrets(ns).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
