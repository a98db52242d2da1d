package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

// newEtcdCommand manages the members of an embedded etcd cluster through
// the local server's member.
func newEtcdCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{Use: "etcd", Short: "Manage the embedded etcd cluster (--cluster-init, --server)"}
	member := &cobra.Command{Use: "member", Short: "List or remove etcd members"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the members of the etcd cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withEtcd(cmd.Context(), dataDir, func(ctx context.Context, cli *clientv3.Client) error {
				resp, err := cli.MemberList(ctx)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tID\tPEER URLS\tCLIENT URLS")
				for _, m := range resp.Members {
					name := m.Name
					if name == "" {
						name = "(not started)"
					}
					fmt.Fprintf(w, "%s\t%x\t%s\t%s\n", name, m.ID, strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
				}
				return w.Flush()
			})
		},
	}
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a server's member from the etcd cluster (stop that server first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withEtcd(cmd.Context(), dataDir, func(ctx context.Context, cli *clientv3.Client) error {
				resp, err := cli.MemberList(ctx)
				if err != nil {
					return err
				}
				for _, m := range resp.Members {
					if m.Name == args[0] || fmt.Sprintf("%x", m.ID) == args[0] {
						if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
							return fmt.Errorf("removing member %s: %w", args[0], err)
						}
						fmt.Fprintf(cmd.OutOrStdout(), "removed member %s (%x)\n", args[0], m.ID)
						return nil
					}
				}
				return fmt.Errorf("no etcd member named %q (see edgeplane etcd member list)", args[0])
			})
		},
	}
	addDataDirFlag(cmd.PersistentFlags(), &dataDir)
	member.AddCommand(list, remove)
	cmd.AddCommand(member)
	return cmd
}

// withEtcd runs f with a client of the etcd member of the server running on dataDir.
func withEtcd(ctx context.Context, dataDir string, f func(context.Context, *clientv3.Client) error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "db", rawstore.EndpointFile))
	if err != nil {
		return fmt.Errorf("no running etcd server on %s (%v): start the server with --cluster-init or --server", dataDir, err)
	}
	pki, err := certs.Layout(dataDir)
	if err != nil {
		return err
	}
	cli, err := datastore.NewClient(datastore.ClientConfig{
		Endpoints: []string{strings.TrimSpace(string(b))},
		CAFile:    pki.EtcdCA.Cert, CertFile: pki.EtcdClient.Cert, KeyFile: pki.EtcdClient.Key,
	}, klog.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return f(ctx, cli)
}
