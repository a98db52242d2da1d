package node

import (
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// TestPodLogsDir: --pod-logs-dir reaches the kubelet's options; a relative
// path is refused with the flag's name.
func TestPodLogsDir(t *testing.T) {
	for _, tc := range []struct {
		name, dir, want, wantErr string
	}{
		{name: "default", dir: "", want: ""},
		{name: "absolute", dir: "/var/lib/edgeplane/pod-logs/", want: "/var/lib/edgeplane/pod-logs"},
		{name: "relative", dir: "logs", wantErr: `--pod-logs-dir "logs" must be an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.PodLogsDir = tc.dir
			c, errs := o.Complete("host")
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Fatalf("errors %v, want %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if got := (Config{Settings: c}).KubeletOptions(PathsIn("/d"), Cluster{Config: nodeconfig.Config{ClusterDomain: "cluster.local"}}).PodLogsDir; got != tc.want {
				t.Fatalf("kubelet PodLogsDir = %q, want %q", got, tc.want)
			}
		})
	}
}
