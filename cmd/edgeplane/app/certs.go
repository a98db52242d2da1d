package app

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/certs"
)

func newCertsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Inspect and rotate the server's certificates",
	}
	cmd.AddCommand(newCertsCheckCommand(), newCertsRotateCommand())
	return cmd
}

func newCertsCheckCommand() *cobra.Command {
	var dataDir, within string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "List every certificate with subject, SANs, issuer and expiry; fail if one expires soon",
		Long: "List every certificate of the data dir with its subject, SANs, issuer and expiry.\n" +
			"Exits 1 when a certificate is missing, unreadable, or expires within --warn-within.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			warn, err := parseDays(within)
			if err != nil {
				return fmt.Errorf("--warn-within: %w", err)
			}
			pki, err := certs.Layout(dataDir)
			if err != nil {
				return err
			}
			return printCerts(cmd.OutOrStdout(), certs.Inspect(pki), time.Now(), warn)
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().StringVar(&within, "warn-within", "30d", "Fail when a certificate expires within this time (e.g. 30d, 12h).")
	return cmd
}

// printCerts writes the table and returns an error naming what is wrong.
func printCerts(w io.Writer, infos []certs.CertInfo, now time.Time, warn time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSUBJECT\tISSUER\tEXPIRES\tREMAINING\tSANS")
	var soon, broken []string
	for _, c := range infos {
		if c.Err != nil {
			broken = append(broken, c.Name)
			fmt.Fprintf(tw, "%s\tERROR: %v\t\t\t\t\n", c.Name, c.Err)
			continue
		}
		left := c.NotAfter.Sub(now)
		if left < warn {
			soon = append(soon, c.Name)
		}
		sans := c.SANs()
		if sans == "" {
			sans = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Subject, c.Issuer,
			c.NotAfter.UTC().Format(time.RFC3339), humanDuration(left), sans)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var problems []string
	if len(broken) > 0 {
		problems = append(problems, fmt.Sprintf("%d unreadable: %s", len(broken), strings.Join(broken, ", ")))
	}
	if len(soon) > 0 {
		problems = append(problems, fmt.Sprintf("%d expire within %s: %s (run `edgeplane certs rotate`; CAs need replacing by hand)",
			len(soon), humanDuration(warn), strings.Join(soon, ", ")))
	}
	if len(problems) > 0 {
		return fmt.Errorf("certificates: %s", strings.Join(problems, "; "))
	}
	fmt.Fprintf(w, "\nAll %d certificates are valid for more than %s.\n", len(infos), humanDuration(warn))
	return nil
}

func newCertsRotateCommand() *cobra.Command {
	var dataDir string
	var services []string
	cmd := &cobra.Command{
		Use:   "rotate",
		Short: "Re-issue leaf certificates now, on a stopped or a running server",
		Long: "Re-issue the leaf certificates (all, or those named with --service) with a fresh lifetime,\n" +
			"keeping their keys, names and CAs. A running server picks them up without a restart.\n" +
			"Names: " + strings.Join(mustLayout().LeafNames(), ", ") + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := openDataDir(dataDir)
			if err != nil {
				return err
			}
			defer st.Release()
			pki, err := certs.Layout(st.Dir)
			if err != nil {
				return err
			}
			validity, err := certs.LeafLifetimeFromEnv()
			if err != nil {
				return err
			}
			ctx := klog.NewContext(cmd.Context(), klog.Background().V(1))
			done, err := certs.Rotate(ctx, pki, certs.RotateOptions{Names: services, LeafValidity: validity})
			if len(done) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "Re-issued: %s\n", strings.Join(done, ", "))
			}
			if err != nil {
				return err
			}
			if st.Running {
				fmt.Fprintf(cmd.OutOrStdout(), "The running server (pid %s) reloads them by itself.\n", st.PID)
			}
			return nil
		},
	}
	addDataDirFlag(cmd.Flags(), &dataDir)
	cmd.Flags().StringSliceVar(&services, "service", nil, "Certificate to re-issue (repeatable, comma-separated); default: every leaf certificate.")
	return cmd
}

func mustLayout() *certs.PKI {
	p, _ := certs.Layout("/")
	return p
}

// parseDays parses a Go duration that may also use a "d" (24h) unit, as in "30d".
func parseDays(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > int(math.MaxInt64/int64(24*time.Hour)) { // beyond: the duration overflows
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30d or 12h", s)
	}
	return d, nil
}

// humanDuration prints days for long spans, else a rounded Go duration.
func humanDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%s%dd", sign, int(d/(24*time.Hour)))
	case d >= time.Hour:
		return sign + d.Round(time.Minute).String()
	default:
		return sign + d.Round(time.Second).String()
	}
}
