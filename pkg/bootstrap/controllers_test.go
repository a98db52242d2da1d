package bootstrap

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseDisable(t *testing.T) {
	cases := []struct {
		values  []string
		want    []string
		wantErr string
	}{
		{values: nil, want: nil},
		{values: []string{"controller-manager,scheduler"}, want: []string{"controller-manager", "scheduler"}},
		{values: []string{"scheduler", " controller-manager "}, want: []string{"controller-manager", "scheduler"}},
		{values: []string{"scheduler,,scheduler"}, want: []string{"scheduler"}},
		{values: []string{"scheduler,kubelet"}, want: []string{"kubelet", "scheduler"}},
		{values: []string{"flannel,kube-proxy"}, want: []string{"flannel", "kube-proxy"}},
		{values: []string{"network-policy"}, want: []string{"network-policy"}},
		{values: []string{"coredns", "servicelb"}, want: []string{"coredns", "servicelb"}},
		{values: []string{"scheduler,telemetry"}, want: []string{"scheduler"}, wantErr: `--disable "telemetry" is not one of: controller-manager, scheduler, kubelet, flannel, kube-proxy, network-policy, coredns, servicelb, helm-controller, local-storage, ingress, metrics-server`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.values, "|"), func(t *testing.T) {
			got, errs := parseDisable(false, tc.values)
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tc.want) {
				t.Errorf("disabled = %v, want %v", keys, tc.want)
			}
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Errorf("errors %v", errs)
			case tc.wantErr != "" && (len(errs) != 1 || errs[0].Error() != tc.wantErr):
				t.Errorf("errors %v, want %q", errs, tc.wantErr)
			}
		})
	}
}

// TestParseAgentDisable: an agent turns off only what it runs on its own.
func TestParseAgentDisable(t *testing.T) {
	cases := []struct {
		values  []string
		want    []string
		wantErr string
	}{
		{values: nil, want: nil},
		{values: []string{"network-policy"}, want: []string{"network-policy"}},
		{values: []string{"api-cache"}, want: []string{"api-cache"}},
		{values: []string{"kubelet"}, want: nil, wantErr: `--disable "kubelet" is not one of: network-policy, api-endpoint, api-cache`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.values, "|"), func(t *testing.T) {
			got, errs := parseDisable(true, tc.values)
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tc.want) {
				t.Errorf("disabled = %v, want %v", keys, tc.want)
			}
			switch {
			case tc.wantErr == "" && len(errs) > 0:
				t.Errorf("errors %v", errs)
			case tc.wantErr != "" && (len(errs) != 1 || errs[0].Error() != tc.wantErr):
				t.Errorf("errors %v, want %q", errs, tc.wantErr)
			}
		})
	}
}
