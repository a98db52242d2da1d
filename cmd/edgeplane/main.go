// Command edgeplane is a whole Kubernetes control plane in one process.
package main

import (
	"os"

	"github.com/edgeplane/edgeplane/cmd/edgeplane/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:]))
}
