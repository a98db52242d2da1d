package controllers

import (
	"testing"

	cmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

func TestCapWorkers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    int32
		wantGC int32 // upstream's default is 20
		wantNS int32 // upstream's default is 10
	}{
		{"zero keeps upstream's defaults", 0, 20, 10},
		{"two caps every controller", 2, 2, 2},
		{"a cap above a default leaves it", 15, 15, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := cmoptions.NewKubeControllerManagerOptions()
			if err != nil {
				t.Fatal(err)
			}
			capWorkers(s, tc.max)
			if got := s.GarbageCollectorController.ConcurrentGCSyncs; got != tc.wantGC {
				t.Errorf("gc workers = %d, want %d", got, tc.wantGC)
			}
			if got := s.NamespaceController.ConcurrentNamespaceSyncs; got != tc.wantNS {
				t.Errorf("namespace workers = %d, want %d", got, tc.wantNS)
			}
			if tc.max > 0 && s.DeploymentController.ConcurrentDeploymentSyncs > tc.max {
				t.Errorf("deployment workers = %d over the cap %d", s.DeploymentController.ConcurrentDeploymentSyncs, tc.max)
			}
			if errs := s.DeploymentController.Validate(); len(errs) > 0 {
				t.Errorf("capped options do not validate: %v", errs)
			}
		})
	}
}
