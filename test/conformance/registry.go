package conformance

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/edgeplane/edgeplane/internal/testing/testregistry"
)

// Registry is the read-only OCI distribution registry of
// internal/testing/testregistry. Containerd reaches it as the mirror of
// registry.k8s.io and docker.io (hosts.toml), so that the specs that pull
// with imagePullPolicy: Always pull, and every image keeps its upstream
// name.
type Registry = testregistry.Registry

// NewRegistry indexes the OCI layout tarballs (*.tar) of dir; every blob's
// digest is checked.
func NewRegistry(dir string) (*Registry, error) { return testregistry.New(dir) }

// MirrorHosts are the registries the images' names name, and those of the
// names some specs pull to see a pull fail: none of them is ever dialled.
var MirrorHosts = []string{"registry.k8s.io", "docker.io", "gcr.io", "invalid.registry.k8s.io", "quay.io"}

// WriteHostsDir writes a containerd registry configuration directory
// (config_path: <dir>/<host>/hosts.toml) that sends pulls of every
// MirrorHosts registry to the registry at address (host:port), plain HTTP.
// The registry is each one's server too, so that a pull it cannot serve
// fails there instead of going on to the real registry.
func WriteHostsDir(dir, address string) error {
	for _, h := range MirrorHosts {
		d := filepath.Join(dir, h)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		body := fmt.Sprintf("# edgeplane test/conformance: the local read-only registry of the built images.\n"+
			"server = %[1]q\n\n[host.%[1]q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+address)
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}
