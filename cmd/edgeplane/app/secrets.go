package app

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/encryption"
	"github.com/edgeplane/edgeplane/pkg/rawstore"
)

const secretsPrefix = "/registry/secrets/"

func newSecretsEncryptCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets-encrypt",
		Short: "Show and rotate the encryption of Secrets at rest",
	}
	cmd.AddCommand(newSecretsStatusCommand(), newSecretsRotateCommand())
	return cmd
}

func newSecretsStatusCommand() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the keys, whether the server uses them, and how the stored Secrets are encrypted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := openDataDir(dataDir)
			if err != nil {
				return err
			}
			defer st.Release()
			out := cmd.OutOrStdout()
			path := encryption.Path(st.Dir)
			cfg, data, err := encryption.Load(path)
			if err != nil {
				fmt.Fprintf(out, "Encryption: off (%v)\n", err)
				return nil
			}
			keys := encryption.Keys(cfg)
			fmt.Fprintf(out, "Encryption: on (secretbox)\nConfig: %s\nWrite key: %s\n", path, keys[0])
			if len(keys) > 1 {
				fmt.Fprintf(out, "Also decrypting with: %s\n", strings.Join(keys[1:], ", "))
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().V(1))
			if st.Running {
				state := "loaded"
				if cs, err := adminClient(st.Dir); err != nil {
					state = "unknown (" + err.Error() + ")"
				} else if active, err := encryption.ActiveHash(ctx, cs); err != nil {
					state = "unknown (" + err.Error() + ")"
				} else if active != encryption.Hash(data) {
					state = "reload pending (the server re-reads it within a minute)"
				}
				fmt.Fprintf(out, "Running server (pid %s): %s\n", st.PID, state)
			} else {
				fmt.Fprintln(out, "Server: not running")
			}
			counts, err := countSecrets(ctx, st)
			if err != nil {
				return err
			}
			total := 0
			for _, n := range counts {
				total += n
			}
			fmt.Fprintf(out, "Stored Secrets: %d\n", total)
			for _, k := range slices.Sorted(maps.Keys(counts)) {
				fmt.Fprintf(out, "  %s: %d\n", k, counts[k])
			}
			if counts[encryption.Unencrypted] > 0 {
				fmt.Fprintln(out, "Some Secrets are stored unencrypted: run `edgeplane secrets-encrypt rotate-keys` to encrypt them.")
			}
			return nil
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	return cmd
}

// countSecrets counts the stored Secrets by how they are encrypted.
func countSecrets(ctx context.Context, st *dataDirState) (map[string]int, error) {
	kind, err := rawstore.Detect(st.Dir, "")
	if err != nil {
		return nil, err
	}
	store, err := rawstore.Open(ctx, rawstore.Options{DataDir: st.Dir, Kind: kind, Running: st.Running})
	if err != nil {
		return nil, err
	}
	defer store.Close(ctx)
	kvs, err := store.List(ctx, secretsPrefix)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, kv := range kvs {
		counts[encryption.Classify(kv.Value)]++
	}
	return counts, nil
}

func newSecretsRotateCommand() *cobra.Command {
	var dataDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "rotate-keys",
		Short: "Encrypt every Secret with a new key and drop the old ones, without a restart",
		Long: "Add a new key as the write key, wait for the running server to load it, rewrite every Secret,\n" +
			"check that none is left under an old key, then drop the old keys. The server must be running.\n" +
			"The dropped keys are kept in <data-dir>/tls/" + encryption.RetiredFileName + ": `snapshot restore` puts\n" +
			"back those that the restored Secrets need.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := openDataDir(dataDir)
			if err != nil {
				return err
			}
			defer st.Release()
			if !st.Running {
				return fmt.Errorf("no server is running on %s: start it first, Secrets are re-encrypted through its API", st.Dir)
			}
			cs, err := adminClient(st.Dir)
			if err != nil {
				return err
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().V(1))
			key, err := encryption.RotateKeys(ctx, encryption.RotateOptions{
				Path:        encryption.Path(st.Dir),
				RetiredPath: encryption.RetiredPath(st.Dir),
				Client:      cs,
				Remaining: func(ctx context.Context, key string) (int, error) {
					counts, err := countSecrets(ctx, st)
					if err != nil {
						return 0, err
					}
					left := 0
					for k, n := range counts {
						if k != "secretbox/"+key {
							left += n
						}
					}
					return left, nil
				},
				ReloadTimeout: timeout,
				Out:           cmd.OutOrStdout(),
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Secrets are encrypted with %s only.\n", key)
			return nil
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().DurationVar(&timeout, "reload-timeout", 3*time.Minute, "How long to wait for the server to load each new configuration.")
	return cmd
}
