package kubelet

import "testing"

// TestKubeletAPIPort: the port the node tunnel lets the servers dial is the
// kubelet's, moved by --kubelet-arg port=N (pkg/node's tunnel).
func TestKubeletAPIPort(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{name: "default", want: 10250},
		{name: "moved", args: []string{"max-pods=20", "port=11250"}, want: 11250},
		{name: "dashes", args: []string{"--port=11251"}, want: 11251},
		{name: "healthz port is another", args: []string{"healthz-port=11252"}, want: 10250},
		{name: "not a port", args: []string{"port=x"}, want: 10250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := APIPort(tc.args); got != tc.want {
				t.Errorf("APIPort(%v) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}
