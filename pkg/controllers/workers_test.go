package controllers

import (
	"reflect"
	"strings"
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
			syncs := concurrentSyncs(reflect.ValueOf(s).Elem(), "")
			if len(syncs) < 20 {
				t.Fatalf("found %d concurrent-syncs settings, upstream has 21: the walk is broken", len(syncs))
			}
			for name, n := range syncs {
				if tc.max > 0 && n > tc.max {
					t.Errorf("%s = %d over the cap %d", name, n, tc.max)
				}
			}
			if errs := s.DeploymentController.Validate(); len(errs) > 0 {
				t.Errorf("capped options do not validate: %v", errs)
			}
		})
	}
}

// concurrentSyncs finds every int32 setting named Concurrent… in the
// controller-manager's options (v, a struct), by its path.
func concurrentSyncs(v reflect.Value, path string) map[string]int32 {
	out := map[string]int32{}
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		name := path + sf.Name
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		switch {
		case f.Kind() == reflect.Struct:
			for k, n := range concurrentSyncs(f, name+".") {
				out[k] = n
			}
		case f.Kind() == reflect.Int32 && strings.Contains(sf.Name, "Concurrent"):
			out[name] = int32(f.Int())
		}
	}
	return out
}
