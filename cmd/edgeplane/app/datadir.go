package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/edgeplane/edgeplane/internal/kubeclient"
	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/config"
)

// dataDirAnnotation marks the --data-dir flags that addDataDirFlag adds.
const dataDirAnnotation = "edgeplane/server-data-dir"

// addDataDirFlag adds --data-dir for commands that work on a server's data
// dir. Unset, it is serverDataDir, filled in by resolveDataDir when the
// command runs.
func addDataDirFlag(fs *pflag.FlagSet, dir *string) {
	fs.StringVar(dir, "data-dir", "", "Data dir of the server (default: $"+dataDirEnv+
		", else data-dir in "+config.DefaultPath+" and its drop-ins, else the server's default).")
	_ = fs.SetAnnotation("data-dir", dataDirAnnotation, []string{"true"})
}

// resolveDataDir fills in the running command's --data-dir from
// addDataDirFlag when it was not given, so that only the commands that use
// it read the config file (`edgeplane server` has its own --data-dir).
func resolveDataDir(cmd *cobra.Command, _ []string) error {
	f := cmd.Flags().Lookup("data-dir")
	if f == nil || f.Changed {
		return nil
	}
	if _, ok := f.Annotations[dataDirAnnotation]; !ok {
		return nil
	}
	return f.Value.Set(serverDataDir())
}

// serverDataDir is the data dir of the server that `edgeplane server` with no
// flags runs: $EDGEPLANE_DATA_DIR when set, else the config file's data-dir,
// else the default.
func serverDataDir() string { return dataDirDefault(os.Getenv, config.DefaultPath) }

func dataDirDefault(getenv func(string) string, configPath string) string {
	if dir := getenv(dataDirEnv); dir != "" {
		return dir
	}
	return configuredDataDir(configPath)
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
	return kubeclient.New(path, "cli", kubeclient.Burst)
}
