package e2e

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"

	"github.com/edgeplane/edgeplane/pkg/chain"
)

// testBootstrapPolicy checks what edgeplane's bootstrap hooks (pkg/chain,
// bootstraphooks.go, in place of upstream's) leave behind: every upstream
// bootstrap role and binding exists and a dry-run reconcile (upstream's
// reconciliation, without confirm) finds nothing to add, and every system
// priority class exists with its value.
func testBootstrapPolicy(t *testing.T, s *server) {
	ctx := context.Background()
	// ~270 reads: without client-side throttling.
	cfg := rest.CopyConfig(s.config)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range chain.BootstrapRBAC(client, false) {
		if op, _, err := o.Reconcile(); err != nil || op != reconciliation.ReconcileNone {
			t.Errorf("%s %s/%s: reconcile would %q (%v)", o.Kind, o.Namespace, o.Name, op, err)
		}
	}
	for _, want := range schedulingapiv1.SystemPriorityClasses() {
		got, err := client.SchedulingV1().PriorityClasses().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil || got.Value != want.Value {
			t.Errorf("PriorityClass %s: %v (value %v), want value %d", want.Name, err, got.Value, want.Value)
		}
	}
}
