package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/plugin"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/config"
)

// dataDirEnv names the data dir whose admin kubeconfig `edgeplane kubectl`
// uses when neither KUBECONFIG nor --kubeconfig says otherwise.
const dataDirEnv = "EDGEPLANE_DATA_DIR"

// newKubectlCommand wraps the upstream kubectl. Cobra does not parse its
// flags: every argument goes to kubectl unchanged, but for --version, which
// prints edgeplane's version as on every other command (kubectl has no such
// flag).
func newKubectlCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "kubectl [kubectl arguments]",
		Short:              "Run the built-in kubectl (default kubeconfig: <data-dir>/admin.kubeconfig)",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			asked, err := versionAsked(args)
			if err != nil {
				return err
			}
			if asked {
				fmt.Fprint(cmd.OutOrStdout(), versionText())
				return nil
			}
			os.Exit(Kubectl(args))
			return nil
		},
	}
}

// versionAsked reports whether kubectl's arguments hold --version (or
// --version=true) before a "--", after which they are a command's.
func versionAsked(args []string) (bool, error) {
	asked := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--"+versionFlag {
			asked = true
			continue
		}
		if v, ok := strings.CutPrefix(a, "--"+versionFlag+"="); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return false, fmt.Errorf("--%s=%s: want true or false", versionFlag, v)
			}
			asked = b
		}
	}
	return asked, nil
}

// Kubectl runs the upstream kubectl with args (without the program name) and
// returns its exit code; kubectl itself exits early on most errors, with its
// own codes. It runs for `edgeplane kubectl` and when the binary is invoked
// through a link named kubectl.
func Kubectl(args []string) int {
	dropUpstreamGlobalFlags()
	_, _ = logs.GlogSetter(kubectlcmd.GetLogVerbosity(append([]string{"kubectl"}, args...)))
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	flags := genericclioptions.NewConfigFlags(true).
		WithDeprecatedPasswordFlag().
		WithDiscoveryBurst(300).
		WithDiscoveryQPS(50.0).
		WithWarningPrinter(streams)
	if path := defaultKubeconfig(os.Getenv, serverDataDir); path != "" {
		// The flag default: --kubeconfig on the command line still wins.
		*flags.KubeConfig = path
	}
	cmd := kubectlcmd.NewDefaultKubectlCommandWithArgs(kubectlcmd.KubectlOptions{
		PluginHandler: kubectlcmd.NewDefaultPluginHandler(plugin.ValidPluginFilenamePrefixes),
		Arguments:     append([]string{"kubectl"}, args...),
		ConfigFlags:   flags,
		IOStreams:     streams,
	})
	cmd.SetArgs(args)
	if err := cli.RunNoErrOutput(cmd); err != nil {
		cmdutil.CheckErr(err) // prints as kubectl does and exits
		return 1
	}
	return 0
}

// defaultKubeconfig returns <data-dir>/admin.kubeconfig when KUBECONFIG is
// unset and that file is readable, else "" (kubectl's own defaults apply).
// The data dir is dataDir's (serverDataDir).
func defaultKubeconfig(getenv func(string) string, dataDir func() string) string {
	if getenv("KUBECONFIG") != "" {
		return ""
	}
	path := filepath.Join(dataDir(), bootstrap.AdminKubeconfigName)
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	_ = f.Close()
	return path
}

// configuredDataDir is the data dir `edgeplane server` would use without
// flags: data-dir from the config file at path (the default one) and its
// drop-ins when they set it, else the default for this user.
func configuredDataDir(path string) string {
	o := bootstrap.NewOptions()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	o.AddFlags(fs)
	// The root's klog flags, as stand-ins: kubectl has its own -v.
	fs.Int("v", 0, "")
	fs.String("vmodule", "", "")
	files, err := config.Files(path, false)
	if err != nil || config.Load(fs, files) != nil {
		return bootstrap.DefaultDataDir()
	}
	return o.DataDir
}
