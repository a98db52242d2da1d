package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/edgeplane/edgeplane/pkg/nodeidentity"
)

// newNodeCommand manages what the cluster knows of its nodes' identities.
func newNodeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Manage nodes' identities: forget a node so that a reinstalled host may join under its name",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newNodeForgetCommand())
	return cmd
}

func newNodeForgetCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "forget NAME",
		Short: "Delete node NAME's identity record and its Node, so that a reinstalled host may join as NAME",
		Long: `A node name is bound to the identity key of the node that first joined under it: a node
token's request for NAME's client certificate is denied unless it is signed with that key.
"node forget NAME" deletes that record (kube-system/NAME.node-identity) and the Node NAME, so
that the next node to join as NAME binds the name to its own key. Certificates already issued to
the old node stay valid until they expire: stop the old host first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
				return fmt.Errorf("%q is not a node name: %v", name, msgs)
			}
			client, err := adminClient(dataDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), tokenTimeout)
			defer cancel()
			out := cmd.OutOrStdout()
			// Read for the message only: a malformed record is deleted
			// all the same.
			record, _, getErr := nodeidentity.Get(ctx, client, name)
			existed, err := nodeidentity.Forget(ctx, client, name)
			if err != nil {
				return err
			}
			switch {
			case existed && getErr == nil && record.Fingerprint != "":
				fmt.Fprintf(out, "node %s: identity record deleted (key %s, bound by %s)\n", name, record.Fingerprint, orNone(record.BoundBy))
			case existed:
				fmt.Fprintf(out, "node %s: identity record deleted\n", name)
			}
			err = client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			nodeExisted := err == nil
			switch {
			case err == nil:
				fmt.Fprintf(out, "node %s: Node deleted\n", name)
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("deleting Node %s: %w", name, err)
			}
			if !existed && !nodeExisted {
				return errors.New("no identity record and no Node named " + name + ": nothing to forget (`kubectl get nodes` lists the nodes)")
			}
			fmt.Fprintf(out, "node %s: the next node to join as %s binds the name to its key\n", name, name)
			return nil
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}
