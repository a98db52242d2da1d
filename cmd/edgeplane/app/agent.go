package app

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
	"github.com/edgeplane/edgeplane/pkg/sdnotify"
)

// agentConfigPath is the agent's default config file: its keys are the
// agent's flags, which differ from the server's.
const agentConfigPath = "/etc/edgeplane/agent.yaml"

func newAgentCommand() *cobra.Command {
	o := bootstrap.NewAgentOptions()
	cmd := &cobra.Command{
		Use:   "agent --server https://HOST:6443 --token TOKEN",
		Short: "Join this host to a cluster as a node: the kubelet, with the host's container runtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if len(files) > 0 {
				klog.InfoS("Read config", "files", files)
			}
			completed, err := o.Complete()
			if err != nil {
				return err
			}
			if errs := completed.Validate(); len(errs) > 0 {
				return invalidFlags(errs)
			}
			ctx := signalContext(cmd.Context())
			ctx = klog.NewContext(ctx, klog.Background().WithName("edgeplane-agent"))
			ctx = sdnotify.NewContext(ctx, sdnotify.TakeFromEnvironment())
			return bootstrap.RunAgent(ctx, completed)
		},
	}
	o.AddFlags(cmd.Flags())
	addConfigFlagFor(cmd.Flags(), agentConfigPath)
	return cmd
}
