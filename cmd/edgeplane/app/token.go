package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/edgeplane/edgeplane/pkg/join"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// tokenTimeout bounds one token command's API calls.
const tokenTimeout = 30 * time.Second

// newTokenCommand prints the cluster join token of a server's data dir, or
// its default node token, and manages node tokens.
func newTokenCommand() *cobra.Command {
	var (
		dataDir string
		node    bool
	)
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print the join token of this server's cluster, or (--node) its node token; create, list, delete and rotate node tokens",
		Long: `Without a subcommand, print the join token other servers pass as --token to join this
server's cluster, or with --node the default node token (<data-dir>/node-token) agents pass
to "edgeplane agent --token".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node {
				t, ok, err := nodetoken.ReadFile(dataDir)
				if err != nil {
					return err
				}
				if !ok {
					return errors.New("no node token in " + dataDir + ": a server writes " + nodetoken.FileName + " there when it starts; start it, or check --data-dir")
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), t.String())
				return err
			}
			t, ok, err := join.ReadTokenFile(dataDir)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("no join token in " + dataDir + ": a server writes one when it runs on a shared datastore (--datastore-endpoint https:// or postgres://); for an agent's token use --node")
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), t.String())
			return err
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().BoolVar(&node, "node", false, "Print the default node token (<data-dir>/"+nodetoken.FileName+") instead of the server join token.")
	cmd.AddCommand(newTokenCreateCommand(), newTokenListCommand(), newTokenDeleteCommand(), newTokenRotateCommand())
	return cmd
}

func newTokenCreateCommand() *cobra.Command {
	var (
		dataDir   string
		opts      nodetoken.CreateOptions
		printJoin bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a node token (a kubeadm bootstrap token) and print it as K10<ca-hash>::<id>.<secret>",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if errs := opts.Validate(); len(errs) > 0 {
				return errors.Join(errs...)
			}
			client, err := adminClient(dataDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), tokenTimeout)
			defer cancel()
			server, caPEM, err := clusterInfo(ctx, client)
			if err != nil {
				return err
			}
			t, err := nodetoken.Create(ctx, client, opts)
			if err != nil {
				return err
			}
			t.CAHash = join.CAHash(caPEM)
			out := cmd.OutOrStdout()
			if !printJoin {
				_, err = fmt.Fprintln(out, t.String())
				return err
			}
			spki, err := nodetoken.SPKIHash(caPEM)
			if err != nil {
				return err
			}
			u, err := url.Parse(server)
			if err != nil {
				return fmt.Errorf("cluster-info server %q: %w", server, err)
			}
			_, err = fmt.Fprintf(out, "edgeplane agent --server %s --token %s\nkubeadm join %s --token %s --discovery-token-ca-cert-hash %s\n",
				server, t.String(), u.Host, t.BootstrapToken(), spki)
			return err
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	fs := cmd.Flags()
	fs.DurationVar(&opts.TTL, "ttl", 24*time.Hour, "How long the token is valid (0: it never expires).")
	fs.StringVar(&opts.Description, "description", "", "What the token is for, shown by `token list`.")
	fs.StringSliceVar(&opts.Groups, "groups", []string{nodetoken.NodeGroup}, "Extra groups of the token (system:bootstrappers:...), comma list.")
	fs.BoolVar(&printJoin, "print-join-command", false, "Print the `edgeplane agent` and `kubeadm join` commands that join a node with the token.")
	return cmd
}

func newTokenListCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the cluster's bootstrap tokens (node tokens, and the joining servers' one): ID, TTL, expiry, usages, description, groups",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := adminClient(dataDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), tokenTimeout)
			defer cancel()
			infos, err := nodetoken.List(ctx, client)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTTL\tEXPIRES\tUSAGES\tDESCRIPTION\tEXTRA GROUPS")
			now := time.Now()
			for _, i := range infos {
				ttl, expires := "<forever>", "<never>"
				if !i.Expires.IsZero() {
					expires = i.Expires.UTC().Format(time.RFC3339)
					if left := i.Expires.Sub(now); left > 0 {
						ttl = duration.ShortHumanDuration(left)
					} else {
						ttl = "<expired>"
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", i.ID, ttl, expires, orNone(strings.Join(i.Usages, ",")),
					orNone(i.Description), orNone(strings.Join(i.Groups, ",")))
			}
			return w.Flush()
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func newTokenDeleteCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "delete ID...",
		Short: "Delete bootstrap tokens by ID (or <id>.<secret>); nodes that joined keep their certificates",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			client, err := adminClient(dataDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), tokenTimeout)
			defer cancel()
			var errs []error // every ID is tried
			for _, id := range ids {
				if err := nodetoken.Delete(ctx, client, id); err != nil {
					errs = append(errs, err)
					continue
				}
				if t, err := nodetoken.Parse(id); err == nil {
					id = t.ID
				}
				fmt.Fprintf(cmd.OutOrStdout(), "token %s deleted\n", id)
			}
			err = errors.Join(errs...)
			return err
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}

func newTokenRotateCommand() *cobra.Command {
	var (
		dataDir string
		node    bool
	)
	cmd := &cobra.Command{
		Use:   "rotate --node",
		Short: "Replace the default node token (<data-dir>/node-token) with a new one and revoke the old one; print the new one",
		Long: `Replace the default node token: a new token is written to <data-dir>/node-token and the
old one's Secret is deleted, so that the old token no longer joins a node. Nodes that joined keep
their certificates; agents that have not joined yet need the new token (printed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !node {
				return errors.New("token rotate rotates the default node token: pass --node (the server join token of a shared datastore is not rotated by this command)")
			}
			client, err := adminClient(dataDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), tokenTimeout)
			defer cancel()
			_, caPEM, err := clusterInfo(ctx, client)
			if err != nil {
				return err
			}
			old, cur, err := nodetoken.RotateDefault(ctx, client, dataDir, caPEM)
			if err != nil {
				return err
			}
			if old.ID != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "default node token %s revoked; nodes that joined with it keep their certificates\n", old.ID)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "default node token %s written to %s\n", cur.ID, filepath.Join(dataDir, nodetoken.FileName))
			_, err = fmt.Fprintln(cmd.OutOrStdout(), cur.String())
			return err
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().BoolVar(&node, "node", false, "Rotate the default node token (required).")
	return cmd
}

// clusterInfo reads the server URL and the cluster CA nodes discover, from
// kube-public/cluster-info.
func clusterInfo(ctx context.Context, client kubernetes.Interface) (server string, caPEM []byte, err error) {
	cm, err := client.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("reading kube-public/cluster-info (the server publishes it at start): %w", err)
	}
	kc, err := clientcmd.Load([]byte(cm.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		return "", nil, fmt.Errorf("kube-public/cluster-info: %w", err)
	}
	for _, c := range kc.Clusters {
		if c.Server != "" && len(c.CertificateAuthorityData) > 0 {
			return c.Server, c.CertificateAuthorityData, nil
		}
	}
	return "", nil, errors.New("kube-public/cluster-info has no server and CA: restart the server to publish it again")
}
