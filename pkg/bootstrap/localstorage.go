package bootstrap

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/localstorage"
	"github.com/edgeplane/edgeplane/pkg/node"
)

// localStorageDirName is the default storage path under the data dir.
const localStorageDirName = "storage"

// localStorageOptions are the flags of local storage.
type localStorageOptions struct {
	Path string
}

// AddFlags binds the options to fs.
func (o *localStorageOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Path, "default-local-storage-path", o.Path, "Directory on every node that holds the volumes of the local-path StorageClass, one directory per volume (default: <data-dir>/"+localStorageDirName+"; created 0700).")
}

// complete resolves the storage path: the flag, made absolute, or the
// default under dataDir.
func (o localStorageOptions) complete(dataDir string) (string, []error) {
	p := strings.TrimSpace(o.Path)
	if p == "" {
		if dataDir == "" {
			return "", nil // --data-dir's own error says it
		}
		return filepath.Join(dataDir, localStorageDirName), nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", []error{fmt.Errorf("--default-local-storage-path %q: %v", o.Path, err)}
	}
	if abs == "/" {
		return "", []error{fmt.Errorf("--default-local-storage-path %q: give a directory of its own, such as /var/lib/edgeplane/storage", o.Path)}
	}
	return abs, nil
}

// localStoragePath is the storage path nodes are told: empty when local
// storage is disabled.
func (o CompletedOptions) localStoragePath() string {
	if o.Disabled[node.PartLocalStorage] {
		return ""
	}
	return o.LocalStoragePath
}

// startLocalStorage grants nodes what their local storage part needs,
// makes the local-path StorageClass and starts the provisioner; with
// --disable=local-storage it removes the class and the grant instead, and
// existing volumes keep working. It runs before the node settings are
// published: a node told to run its part finds its access granted.
func (s *server) startLocalStorage(ctx context.Context, o CompletedOptions) error {
	client, err := s.adminClient(localstorage.ComponentName)
	if err != nil {
		return err
	}
	if o.Disabled[node.PartLocalStorage] {
		return kubeclient.Retry(ctx, "disabling local storage", startupRetry, func(ctx context.Context) error {
			return localstorage.Disable(ctx, client)
		})
	}
	if err := kubeclient.Retry(ctx, "setting up local storage", startupRetry, func(ctx context.Context) error {
		return localstorage.Ensure(ctx, client)
	}); err != nil {
		return err
	}
	p, err := localstorage.NewProvisioner(localstorage.ProvisionerOptions{
		Kubeconfig: s.pki.AdminKubeconfig, Path: o.LocalStoragePath, Informers: s.chain.Informers(),
	})
	if err != nil {
		return err
	}
	return s.mgr.Start(ctx, p, stopTimeout)
}
