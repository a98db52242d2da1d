package app

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/edgeplane/edgeplane/pkg/join"
)

// newTokenCommand prints the cluster join token of a server's data dir.
func newTokenCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print the join token other servers pass as --token to join this server's cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, ok, err := join.ReadTokenFile(dataDir)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("no join token in " + dataDir + ": a server writes one when it runs on a shared datastore (--datastore-endpoint https:// or postgres://)")
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), t.String())
			return err
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}
