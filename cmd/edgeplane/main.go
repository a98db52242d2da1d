// Command edgeplane is a whole Kubernetes control plane in one process.
package main

import (
	"os"
	"path/filepath"

	"github.com/edgeplane/edgeplane/cmd/edgeplane/app"
)

func main() {
	// Installed as a link named kubectl, the binary is kubectl.
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(app.Kubectl(os.Args[1:]))
	}
	os.Exit(app.Main(os.Args[1:]))
}
