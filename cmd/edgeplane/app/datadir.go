package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
)

// addDataDirFlag adds --data-dir for commands that work on a server's data
// dir; the default is the server's, or $EDGEPLANE_DATA_DIR when set.
func addDataDirFlag(fs *pflag.FlagSet, dir *string) {
	def := os.Getenv(dataDirEnv)
	if def == "" {
		def = bootstrap.DefaultDataDir()
	}
	fs.StringVar(dir, "data-dir", def, "Data dir of the server (also $"+dataDirEnv+").")
}

// dataDirState says whether a server runs on dir. When none runs, the data
// dir lock is taken and release drops it; it is a no-op otherwise.
type dataDirState struct {
	Dir     string
	Running bool
	PID     string
	release func()
}

func (s *dataDirState) Release() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// openDataDir resolves dir and checks whether a server holds it.
func openDataDir(dir string) (*dataDirState, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %q: %w", dir, err)
	}
	st := &dataDirState{Dir: abs}
	release, err := bootstrap.LockDataDir(abs)
	var inUse *bootstrap.InUseError
	switch {
	case errors.As(err, &inUse):
		st.Running, st.PID = true, inUse.PID
	case err != nil:
		return nil, err
	default:
		st.release = release
	}
	return st, nil
}

// adminClient is a client of the server on dir, as its admin.
func adminClient(dir string) (kubernetes.Interface, error) {
	path := filepath.Join(dir, bootstrap.AdminKubeconfigName)
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	cfg.UserAgent = "edgeplane-cli"
	return kubernetes.NewForConfig(cfg)
}
