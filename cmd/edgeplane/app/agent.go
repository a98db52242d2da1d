package app

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/pkg/bootstrap"
)

// agentConfigPath is the agent's default config file: its keys are the
// agent's flags, which differ from the server's.
const agentConfigPath = "/etc/edgeplane/agent.yaml"

// tokenEnv is read when --token is not given (install.sh's agent service).
const tokenEnv = "EDGEPLANE_TOKEN"

func newAgentCommand() *cobra.Command {
	o := bootstrap.NewAgentOptions()
	cmd := &cobra.Command{
		Use:   "agent --server https://HOST:6443 --token TOKEN",
		Short: "Join this host to a cluster as a node: the kubelet, with the host's container runtime",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := readConfig(cmd); err != nil {
				return err
			}
			if o.Token == "" {
				// From the service's env file (0600), kept off the command line.
				o.Token = os.Getenv(tokenEnv)
			}
			completed, err := o.Complete()
			if err != nil {
				return err
			}
			if errs := completed.Validate(); len(errs) > 0 {
				return invalidFlags(errs)
			}
			return bootstrap.RunAgent(runContext(cmd, "edgeplane-agent"), completed)
		},
	}
	o.AddFlags(cmd.Flags())
	addConfigFlagFor(cmd.Flags(), agentConfigPath)
	return cmd
}
