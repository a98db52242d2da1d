// Package app is the edgeplane command line.
package app

import (
	goflag "flag"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
)

// Version is edgeplane's own version, stamped at build time with
// -ldflags "-X github.com/edgeplane/edgeplane/cmd/edgeplane/app.Version=...".
var Version = "dev"

// Commit is the git commit edgeplane was built from, stamped like Version.
var Commit = "unknown"

// Main runs the command line and returns the process exit code.
func Main(args []string) int {
	cmd := NewRootCommand(os.Stdout, os.Stderr)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "edgeplane: %v\n", err)
		return 1
	}
	return 0
}

// NewRootCommand builds the `edgeplane` command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "edgeplane",
		Short:         "A whole Kubernetes control plane for edge hosts, in one binary",
		SilenceUsage:  true,
		SilenceErrors: true,
		// No subcommand has its own PersistentPreRunE: this one runs for all.
		PersistentPreRunE: resolveDataDir,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	addKlogFlags(root.PersistentFlags())
	root.AddCommand(newServerCommand(), newAgentCommand(), newVersionCommand(), newKubectlCommand(), newCheckCommand())
	root.AddCommand(newCertsCommand(), newSnapshotCommand(), newSecretsEncryptCommand())
	root.AddCommand(newTokenCommand(), newNodeCommand(), newEtcdCommand())
	return root
}

// addKlogFlags exposes klog's verbosity (-v) and --vmodule on every command.
func addKlogFlags(fs *pflag.FlagSet) {
	gofs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(gofs)
	for _, name := range []string{"v", "vmodule"} {
		fs.AddGoFlag(gofs.Lookup(name))
	}
	fs.Lookup("v").Shorthand = "v"
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the edgeplane and Kubernetes versions",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			k := version.Get()
			fmt.Fprintf(cmd.OutOrStdout(), "edgeplane %s\ncommit %s\nkubernetes %s\ngo %s %s/%s\n",
				Version, Commit, k.GitVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
