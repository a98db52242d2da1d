package chain

import (
	"maps"
	"testing"
	"time"

	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// TestTuningLeanStorage: LeanStorage turns the object count polling off and
// names the gates it turns off; the zero Tuning keeps upstream's minute and
// sets no gate.
func TestTuningLeanStorage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tuning    Tuning
		wantPoll  time.Duration
		wantGates map[string]bool
	}{
		{"upstream's defaults", Tuning{}, time.Minute, nil},
		{"lean storage", Tuning{LeanStorage: true}, 0, map[string]bool{
			"ConcurrentWatchObjectDecode": false, "DetectCacheInconsistency": false, "SizeBasedListCostEstimate": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := options.NewServerRunOptions()
			applyTuningOptions(s, tc.tuning)
			if got := s.Etcd.StorageConfig.CountMetricPollPeriod; got != tc.wantPoll {
				t.Errorf("CountMetricPollPeriod = %s, want %s", got, tc.wantPoll)
			}
			if got := tc.tuning.featureGates(); !maps.Equal(got, tc.wantGates) {
				t.Errorf("featureGates() = %v, want %v", got, tc.wantGates)
			}
		})
	}
}
