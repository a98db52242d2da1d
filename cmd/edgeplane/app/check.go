package app

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/node"
	"github.com/edgeplane/edgeplane/pkg/preflight"
)

// newCheckCommand is the preflight: it takes the server's flags and config
// file, and checks the host for what that server would need.
func newCheckCommand() *cobra.Command {
	o := bootstrap.NewOptions()
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check this host before running the server: clock, port, data dir, memory, cgroups, kernel, container runtime, network",
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
			// The server's own node: its container runtime and the
			// cgroups its kubelet would run on.
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			var managed preflight.ManagedRuntime
			if !disables(o.Disable, "kubelet") {
				choice := node.ChooseRuntime(ctx, o.Node.RuntimeEndpoint)
				managed = preflight.ManagedRuntime{Binary: choice.Managed, Why: choice.Why,
					Dir: node.PathsIn(filepath.Join(dataDir, node.DirName)).Containerd}
				managed.CgroupDriver, managed.CgroupDriverErr = node.ManagedCgroupDriver(o.Node.KubeletArgs)
			}
			runtime := preflight.GatherRuntime(ctx, o.Node.RuntimeEndpoint, disables(o.Disable, "kubelet"), managed)
			findings = append(findings, preflight.EvaluateRuntime(runtime)...)
			// What its pods' network and Services need from the host.
			var nodeIP net.IP
			if len(o.Node.NodeIPs) > 0 {
				nodeIP = net.ParseIP(strings.TrimSpace(o.Node.NodeIPs[0]))
			}
			network := preflight.GatherNetwork("", "", nodeIP, disables(o.Disable, "kubelet"))
			findings = append(findings, preflight.EvaluateNetwork(network)...)
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

// disables tells whether the --disable values (repeatable, comma lists)
// name component.
func disables(values []string, component string) bool {
	for _, v := range values {
		for _, name := range strings.Split(v, ",") {
			if strings.TrimSpace(name) == component {
				return true
			}
		}
	}
	return false
}
