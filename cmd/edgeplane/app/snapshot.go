package app

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/encryption"
	"github.com/edgeplane/edgeplane/pkg/rawstore"
	"github.com/edgeplane/edgeplane/pkg/snapshot"
)

func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, list and restore snapshots of the datastore",
	}
	cmd.AddCommand(newSnapshotSaveCommand(), newSnapshotListCommand(), newSnapshotRestoreCommand())
	return cmd
}

func newSnapshotSaveCommand() *cobra.Command {
	var dataDir, name, kind string
	cmd := &cobra.Command{
		Use:   "save",
		Short: "Snapshot the datastore into <data-dir>/snapshots, whether the server runs or not",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := snapshot.ValidateName(name); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			st, err := openDataDir(dataDir)
			if err != nil {
				return err
			}
			defer st.Release()
			kind, err := rawstore.Detect(st.Dir, kind)
			if err != nil {
				return err
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().V(1))
			store, err := rawstore.Open(ctx, rawstore.Options{DataDir: st.Dir, Kind: kind, Running: st.Running})
			if err != nil {
				return err
			}
			begin := time.Now()
			path, err := snapshot.Save(ctx, store, snapshot.Dir(st.Dir), name, begin)
			if cerr := store.Close(ctx); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			fi, _ := os.Stat(path)
			fmt.Fprintf(cmd.OutOrStdout(), "Saved %s snapshot %s (%s, %.1f s)\n", kind, path, sizeOf(fi), time.Since(begin).Seconds())
			return nil
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().StringVar(&name, "name", snapshot.OnDemandName, "Name prefix of the snapshot file.")
	cmd.Flags().StringVar(&kind, "datastore", "", "Datastore to snapshot, when the data dir holds both (sqlite or etcd).")
	return cmd
}

func newSnapshotListCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the snapshots in <data-dir>/snapshots, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			files, err := snapshot.List(snapshot.Dir(abs))
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FILE\tDATASTORE\tTAKEN\tSIZE")
			for _, f := range files {
				fi, _ := os.Stat(f.Path)
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Path, f.Kind, f.Time.Format(time.RFC3339), sizeOf(fi))
			}
			return tw.Flush()
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}

func newSnapshotRestoreCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the datastore with a snapshot; the server must be stopped",
		Long: "Replace the datastore of the data dir with the snapshot FILE (sqlite or etcd, read from the file).\n" +
			"Refuses while a server runs on the data dir. The replaced datastore is kept beside it\n" +
			"with a .pre-restore-<time> suffix. Secrets in the snapshot decrypt only with the key that\n" +
			"encrypted them: keys dropped by rotate-keys since are put back from tls/" + encryption.RetiredFileName + ".",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			st, err := openDataDir(dataDir)
			if err != nil {
				return err
			}
			defer st.Release()
			if st.Running {
				return fmt.Errorf("a server (pid %s) is running on %s: stop it before restoring a snapshot", st.PID, st.Dir)
			}
			host, _ := os.Hostname()
			if host == "" {
				host = "edgeplane" // as the server names its etcd member
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().V(1))
			kind, err := snapshot.Restore(ctx, snapshot.RestoreOptions{File: file, DataDir: st.Dir, EtcdName: host})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Restored %s snapshot %s into %s.\n", kind, file, st.Dir)
			if err := reinstateKeys(ctx, cmd.OutOrStdout(), st); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Start the server with --datastore %s --data-dir %s\n", kind, st.Dir)
			return nil
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}

// reinstateKeys makes the encryption configuration decrypt the restored
// Secrets: keys that a rotation dropped since the snapshot come back from the
// retired keys file.
func reinstateKeys(ctx context.Context, out io.Writer, st *dataDirState) error {
	path := encryption.Path(st.Dir)
	if _, err := os.Stat(path); err != nil {
		return nil // encryption never turned on here
	}
	counts, err := countSecrets(ctx, st)
	if err != nil {
		return fmt.Errorf("reading the restored Secrets: %w", err)
	}
	added, missing, err := encryption.Reinstate(path, encryption.RetiredPath(st.Dir), slices.Collect(maps.Keys(counts)))
	if err != nil {
		return err
	}
	if len(added) > 0 {
		fmt.Fprintf(out, "Put back retired encryption keys the snapshot's Secrets need: %s (run `edgeplane secrets-encrypt rotate-keys` to retire them again).\n", strings.Join(added, ", "))
	}
	if len(missing) > 0 {
		fmt.Fprintf(out, "WARNING: Secrets in the snapshot are encrypted with keys this data dir does not have: %s. Copy them into %s, or those Secrets cannot be read.\n", strings.Join(missing, ", "), path)
	}
	return nil
}

func sizeOf(fi os.FileInfo) string {
	if fi == nil {
		return "?"
	}
	n := float64(fi.Size())
	for _, unit := range []string{"B", "KiB", "MiB", "GiB"} {
		if n < 1024 || unit == "GiB" {
			return strings.TrimSuffix(fmt.Sprintf("%.1f", n), ".0") + " " + unit
		}
		n /= 1024
	}
	return ""
}
