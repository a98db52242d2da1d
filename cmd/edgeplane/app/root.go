// Package app is the edgeplane command line.
package app

import (
	goflag "flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

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
	dropUpstreamGlobalFlags()
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
	root.AddCommand(newTokenCommand(), newNodeCommand(), newEtcdCommand(), newCrictlCommand(), newCtrCommand())
	addVersionFlag(root)
	return root
}

// versionFlag is --version, on every command.
const versionFlag = "version"

// addVersionFlag makes `--version` print the version and exit 0 on every
// command of root's tree, before the command runs, whatever else the
// command line says. Cobra checks it after parsing the flags and before the
// command's Args, hooks and Run; `edgeplane kubectl`, whose arguments cobra
// does not parse, checks it itself. Call it once the tree is complete: it
// adds cobra's help and completion commands first, so that they have it too.
func addVersionFlag(root *cobra.Command) {
	root.PersistentFlags().Bool(versionFlag, false, "Print the edgeplane and Kubernetes versions and exit.")
	root.SetVersionTemplate("{{.Version}}")
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	text := versionText()
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Version = text
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// versionText is what `edgeplane version` and `--version` print.
func versionText() string {
	k := version.Get()
	return fmt.Sprintf("edgeplane %s\ncommit %s\nkubernetes %s\ngo %s %s/%s\n",
		Version, Commit, k.GitVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

var dropGlobalsOnce sync.Once

// dropUpstreamGlobalFlags empties pflag's process-wide flag set, once.
// Upstream packages register flags there when they are loaded
// (k8s.io/component-base/version/verflag: --version), and cobra adds that
// set to the flags of every command it runs, edgeplane's and kubectl's: each
// such flag is accepted everywhere and acted on nowhere (`edgeplane server
// --version` started a server). edgeplane's commands declare every flag they
// take; upstream's kubectl-convert and docs generator (cmd/genkubedocs) empty
// it the same way.
func dropUpstreamGlobalFlags() {
	dropGlobalsOnce.Do(func() {
		pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)
	})
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
			fmt.Fprint(cmd.OutOrStdout(), versionText())
		},
	}
}
