package bootstrap

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/snapshot"
)

// Day2Options are the flags for running unattended: scheduled snapshots,
// secrets encryption at rest and the audit log.
type Day2Options struct {
	SnapshotSchedule  string
	SnapshotRetention int
	SecretsEncryption bool
	AuditLogPath      string
	AuditPolicyFile   string
	AuditLogMaxSize   int
	AuditLogMaxBackup int
}

func newDay2Options() Day2Options {
	return Day2Options{
		SnapshotSchedule:  snapshot.DefaultSchedule,
		SnapshotRetention: 5,
		SecretsEncryption: true,
		AuditLogMaxSize:   50,
		AuditLogMaxBackup: 3,
	}
}

// AddFlags binds the options to fs.
func (o *Day2Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SnapshotSchedule, "snapshot-schedule", o.SnapshotSchedule, `When to snapshot the datastore into <data-dir>/snapshots, in cron syntax ("0 */12 * * *") or "@every 6h"; empty turns scheduled snapshots off.`)
	fs.IntVar(&o.SnapshotRetention, "snapshot-retention", o.SnapshotRetention, "Number of scheduled snapshots to keep.")
	fs.BoolVar(&o.SecretsEncryption, "secrets-encryption", o.SecretsEncryption, "Encrypt Secrets at rest with a key in <data-dir>/tls/"+"encryption-config.yaml.")
	fs.StringVar(&o.AuditLogPath, "audit-log-path", o.AuditLogPath, "Write the API audit log to this file (off when empty); '-' is standard output.")
	fs.StringVar(&o.AuditPolicyFile, "audit-policy-file", o.AuditPolicyFile, "Audit policy file (default: metadata of every request except health checks and read-only system traffic).")
	fs.IntVar(&o.AuditLogMaxSize, "audit-log-maxsize", o.AuditLogMaxSize, "Size in megabytes at which the audit log is rotated.")
	fs.IntVar(&o.AuditLogMaxBackup, "audit-log-maxbackup", o.AuditLogMaxBackup, "Number of rotated audit log files to keep.")
}

// day2Completed holds the checked Day2Options.
type day2Completed struct {
	Day2Options
	// LeafValidity shortens leaf certificates for tests (certs.LeafLifetimeEnv); 0 is the default.
	LeafValidity time.Duration
}

// complete resolves paths and reports every problem.
func (o Day2Options) complete() (day2Completed, []error) {
	var errs []error
	c := day2Completed{Day2Options: o}
	if o.SnapshotSchedule != "" {
		if _, err := snapshot.ParseSchedule(o.SnapshotSchedule); err != nil {
			errs = append(errs, err)
		}
	}
	if o.SnapshotRetention < 1 {
		errs = append(errs, fmt.Errorf("--snapshot-retention %d: keep at least 1", o.SnapshotRetention))
	}
	if o.AuditLogPath != "" && o.AuditLogPath != "-" {
		abs, err := filepath.Abs(o.AuditLogPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("--audit-log-path %q: %v", o.AuditLogPath, err))
		}
		c.AuditLogPath = abs
	}
	if o.AuditPolicyFile != "" {
		if o.AuditLogPath == "" {
			errs = append(errs, fmt.Errorf("--audit-policy-file needs --audit-log-path"))
		}
		abs, err := filepath.Abs(o.AuditPolicyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--audit-policy-file %q: %v", o.AuditPolicyFile, err))
		}
		c.AuditPolicyFile = abs
	}
	lv, err := certs.LeafLifetimeFromEnv()
	if err != nil {
		errs = append(errs, err)
	}
	c.LeafValidity = lv
	if o.AuditLogMaxSize < 0 {
		errs = append(errs, fmt.Errorf("--audit-log-maxsize %d must not be negative", o.AuditLogMaxSize))
	}
	if o.AuditLogMaxBackup < 0 {
		errs = append(errs, fmt.Errorf("--audit-log-maxbackup %d must not be negative", o.AuditLogMaxBackup))
	}
	return c, errs
}
