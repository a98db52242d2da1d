package kubelet

import (
	"strings"
	"testing"

	"k8s.io/kubernetes/pkg/capabilities"
)

// TestAllowPrivileged: the kubelet's setting is upstream's process-wide one,
// which the first setter fixes. In an agent the kubelet is first; in a
// server its API server was (with the same --allow-privileged), and a
// process that disagrees is refused rather than run with the other setting.
func TestAllowPrivileged(t *testing.T) {
	tests := []struct {
		name    string
		before  *bool // set by someone else first (the API server); nil: nobody
		allow   bool
		wantErr string
	}{
		{name: "first, allowing", allow: true},
		{name: "first, refusing", allow: false},
		{name: "after an API server that agrees", before: ptr(false), allow: false},
		{name: "after an API server that refuses", before: ptr(false), allow: true, wantErr: "already has privileged containers refused, the kubelet is to have them allowed"},
		{name: "after an API server that allows", before: ptr(true), allow: false, wantErr: "already has privileged containers allowed, the kubelet is to have them refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capabilities.ResetForTest()
			t.Cleanup(capabilities.ResetForTest)
			if tt.before != nil {
				capabilities.Setup(*tt.before, 0)
			}
			err := allowPrivileged(tt.allow)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("allowPrivileged(%v): %v, want %q", tt.allow, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// What upstream's RunKubelet does next: it changes nothing.
			capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: true})
			if got := capabilities.Get().AllowPrivileged; got != tt.allow {
				t.Fatalf("after the kubelet's own Initialize, AllowPrivileged = %v, want %v", got, tt.allow)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
