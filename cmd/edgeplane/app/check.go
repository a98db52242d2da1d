package app

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/preflight"
)

// newCheckCommand is the preflight: it takes the server's flags and config
// file, and checks the host for what that server would need.
func newCheckCommand() *cobra.Command {
	o := bootstrap.NewOptions()
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check this host before running the server: clock, port, data dir, memory, cgroups, kernel",
		Long: "Check this host for what `edgeplane server` with the same flags and config file needs.\n" +
			"Prints one finding per line (ok, warn or BLOCKER) and exits non-zero when there is a blocker.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			dataDir := o.DataDir
			if abs, err := filepath.Abs(dataDir); err == nil {
				dataDir = abs
			}
			profile, err := bootstrap.ResolveProfile(o.Profile, preflight.HostMemory())
			if err != nil {
				return err
			}
			findings := preflight.Run(preflight.Options{
				DataDir:     dataDir,
				BindAddress: o.BindAddress,
				HTTPSPort:   o.HTTPSPort,
				Datastore:   o.Datastore,
				Profile:     profile,
			})
			read := preflight.Finding{Check: "config", Message: "no config file"}
			if len(files) > 0 {
				read.Message = "read " + strings.Join(files, ", ")
			}
			findings = append([]preflight.Finding{read}, findings...)
			if preflight.Report(cmd.OutOrStdout(), findings) {
				return errors.New("check found blockers")
			}
			return nil
		},
	}
	o.AddFlags(cmd.Flags())
	addConfigFlag(cmd.Flags())
	return cmd
}
