package controllers

import (
	"context"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

// checkConfigMapControllers checks the two controllers edgeplane runs on
// filtered informers (configmaps.go) in round round of TestInProcess:
// root-ca-cert-publisher publishes the cluster CA in a new namespace, and
// bootstrap-signer signs kube-public/cluster-info for a new bootstrap token.
func checkConfigMapControllers(t *testing.T, ctx context.Context, client kubernetes.Interface, pki *certs.PKI, round int) {
	t.Helper()
	ca, err := os.ReadFile(pki.ServerCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("published-%d", round)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, rootCAConfigMap+" in "+ns, func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, rootCAConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && cm.Data["ca.crt"] == string(ca), err
	})
	// A changed copy is put back.
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, rootCAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ca.crt"] = "tampered"
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, rootCAConfigMap+" in "+ns+" restored", func(ctx context.Context) (bool, error) {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, rootCAConfigMap, metav1.GetOptions{})
		return err == nil && cm.Data["ca.crt"] == string(ca), err
	})

	if round == 1 {
		info := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo},
			Data:       map[string]string{bootstrapapi.KubeConfigKey: "apiVersion: v1\nkind: Config\nclusters: []\n"},
		}
		if _, err := client.CoreV1().ConfigMaps(metav1.NamespacePublic).Create(ctx, info, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	id := fmt.Sprintf("tokid%d", round)
	token := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstrapapi.BootstrapTokenSecretPrefix + id},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:           id,
			bootstrapapi.BootstrapTokenSecretKey:       "0123456789abcdef",
			bootstrapapi.BootstrapTokenUsageSigningKey: "true",
		},
	}
	if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, token, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "cluster-info signed for token "+id, func(ctx context.Context) (bool, error) {
		info, err := client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		return err == nil && info.Data[bootstrapapi.JWSSignatureKeyPrefix+id] != "", err
	})
}
