// Command edgeplane is a whole Kubernetes control plane in one process.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	// Before anything that imports kubectl: its catalog is loaded only
	// when the process runs kubectl.
	_ "github.com/edgeplane/edgeplane/internal/kubectli18n"

	"github.com/edgeplane/edgeplane/cmd/edgeplane/app"
	"github.com/edgeplane/edgeplane/internal/kubeversion"
)

func main() {
	// An unstamped build (go build, go run) reports go.mod's Kubernetes
	// version, as a release does; kubeversion set it at init.
	if err := kubeversion.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "edgeplane: warning: %v\n", err)
	}
	// Installed as a link named kubectl, the binary is kubectl.
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(app.Kubectl(os.Args[1:]))
	}
	os.Exit(app.Main(os.Args[1:]))
}
