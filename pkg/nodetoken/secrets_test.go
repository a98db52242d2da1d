package nodetoken

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// TestDeleteWaitsForUnsigning: Delete returns once cluster-info has dropped
// the token's signature, and says so when it does not.
func TestDeleteWaitsForUnsigning(t *testing.T) {
	const id = "abcdef"
	sigKey := bootstrapapi.JWSSignatureKeyPrefix + id
	tests := []struct {
		name string
		// unsign: whether the bootstrap signer drops the signature.
		unsign  bool
		wantErr string
	}{
		{name: "signer drops the signature", unsign: true},
		{name: "signature stays", unsign: false, wantErr: "still carries its signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func(d time.Duration) { unsignWait = d }(unsignWait)
			unsignWait = 500 * time.Millisecond
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: bootstraputil.BootstrapTokenSecretName(id)}}
			info := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespacePublic, Name: bootstrapapi.ConfigMapClusterInfo},
				Data:       map[string]string{bootstrapapi.KubeConfigKey: "x", sigKey: "sig"},
			}
			client := fake.NewClientset(secret, info)
			// The stand-in for the bootstrap signer drops the signature
			// once Delete has read cluster-info twice after the delete.
			deleted, reads := false, 0
			client.PrependReactor("delete", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
				deleted = true
				return false, nil, nil
			})
			client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				if !deleted {
					return false, nil, nil
				}
				if reads++; tt.unsign && reads > 2 {
					cm := info.DeepCopy()
					delete(cm.Data, sigKey)
					return true, cm, nil
				}
				return true, info.DeepCopy(), nil
			})
			err := Delete(context.Background(), client, id)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Delete: %v", err)
				}
				if reads != 3 {
					t.Fatalf("Delete read cluster-info %d times, want 3 (it returned before the signature was gone, or kept reading)", reads)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Delete: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
