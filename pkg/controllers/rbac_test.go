package controllers

import (
	"context"
	"errors"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func TestEnsureNodeBootstrapRBAC(t *testing.T) {
	ctx := context.Background()
	tightened := groupBinding("edgeplane:node-autoapprove-certificate-rotation", selfNodeClientRole, "someone-else")
	// What an earlier version made: upstream's nodeclient auto-approval for
	// every bootstrap token.
	retired := groupBinding(RetiredAutoApproveBinding, nodeClientRole, "system:bootstrappers")
	cases := []struct {
		name     string
		existing []runtime.Object
		react    clienttesting.ReactionFunc
		wantErr  bool
		// want maps binding name to the subject group expected afterwards.
		want map[string]string
	}{
		{
			name: "creates all, and no auto-approval of node token requests",
			want: map[string]string{
				"edgeplane:kubelet-bootstrap":                     "system:bootstrappers",
				"edgeplane:node-autoapprove-certificate-rotation": "system:nodes",
			},
		},
		{
			name:     "keeps an operator's change",
			existing: []runtime.Object{tightened},
			want: map[string]string{
				"edgeplane:kubelet-bootstrap":                     "system:bootstrappers",
				"edgeplane:node-autoapprove-certificate-rotation": "someone-else",
			},
		},
		{
			name:     "deletes the retired auto-approval on an upgraded cluster",
			existing: []runtime.Object{retired},
			want: map[string]string{
				"edgeplane:kubelet-bootstrap":                     "system:bootstrappers",
				"edgeplane:node-autoapprove-certificate-rotation": "system:nodes",
			},
		},
		{
			name:  "retries transient errors",
			react: failTimes(2, apierrors.NewServiceUnavailable("starting")),
			want:  map[string]string{"edgeplane:kubelet-bootstrap": "system:bootstrappers"},
		},
		{
			name:    "gives up when forbidden",
			react:   failTimes(1, apierrors.NewForbidden(schema.GroupResource{Resource: "clusterrolebindings"}, "x", errors.New("no"))),
			wantErr: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.existing...)
			if tc.react != nil {
				client.PrependReactor("create", "clusterrolebindings", tc.react)
			}
			err := EnsureNodeBootstrapRBAC(ctx, client)
			if (err != nil) != tc.wantErr {
				t.Fatalf("EnsureNodeBootstrapRBAC() = %v, want error %v", err, tc.wantErr)
			}
			// Idempotent.
			if !tc.wantErr {
				if err := EnsureNodeBootstrapRBAC(ctx, client); err != nil {
					t.Fatalf("second run: %v", err)
				}
			}
			if !tc.wantErr {
				// No binding may grant upstream's nodeclient approval: node
				// token requests are the CSR approver's.
				list, err := client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range list.Items {
					if b.RoleRef.Name == nodeClientRole {
						t.Errorf("ClusterRoleBinding %s grants %s to %+v", b.Name, nodeClientRole, b.Subjects)
					}
				}
			}
			for name, group := range tc.want {
				b, err := client.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(b.Subjects) != 1 || b.Subjects[0].Name != group || b.Subjects[0].Kind != rbacv1.GroupKind {
					t.Errorf("%s subjects = %+v, want group %s", name, b.Subjects, group)
				}
			}
		})
	}
}

// failTimes fails the first n creates with err, then lets the fake store act.
func failTimes(n int, err error) clienttesting.ReactionFunc {
	return func(clienttesting.Action) (bool, runtime.Object, error) {
		if n > 0 {
			n--
			return true, nil, err
		}
		return false, nil, nil
	}
}
