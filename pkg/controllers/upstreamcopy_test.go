package controllers

import (
	"testing"

	"github.com/edgeplane/edgeplane/internal/testing/upstreamcopy"
)

// TestUpstreamCopies fails when upstream changes a function upstreamcopy.go
// copies: carry the change over, or drop the copy if upstream's Setup now
// takes an informer factory.
func TestUpstreamCopies(t *testing.T) {
	upstreamcopy.Check(t, "k8s.io/kubernetes", "upstreamcopy.go", []upstreamcopy.Copy{
		{
			UpstreamFile: "cmd/kube-scheduler/app/server.go", UpstreamFunc: "Setup",
			CopyFunc: "upstreamSchedulerSetup",
			Replacements: [][2]string{
				{"\tcc := c.Complete()\n", "\tcc := c.Complete()\n\tadjust(&cc)\n"},
				{"getRecorderFactory(&cc)", "schedulerRecorderFactory(&cc)"},
			},
		},
		{
			UpstreamFile: "cmd/kube-scheduler/app/server.go", UpstreamFunc: "getRecorderFactory",
			CopyFunc: "schedulerRecorderFactory",
		},
	})
}
