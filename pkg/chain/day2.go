package chain

import (
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// Day2 turns on what an unattended server needs besides serving: secrets
// encryption at rest and the audit log. The zero value turns both off.
type Day2 struct {
	// EncryptionConfigFile is an EncryptionConfiguration; the API server
	// reloads it when it changes (key rotation without a restart).
	EncryptionConfigFile string
	// AuditLogPath is the audit log file ("-" for standard output); empty
	// turns auditing off. AuditPolicyFile is then required.
	AuditLogPath    string
	AuditPolicyFile string
	// AuditLogMaxSize (megabytes) and AuditLogMaxBackup rotate the log by size.
	AuditLogMaxSize, AuditLogMaxBackup int
}

// applyDay2 sets the upstream options for d.
func applyDay2(s *options.ServerRunOptions, d Day2) {
	if d.EncryptionConfigFile != "" {
		s.Etcd.EncryptionProviderConfigFilepath = d.EncryptionConfigFile
		s.Etcd.EncryptionProviderConfigAutomaticReload = true
	}
	if d.AuditLogPath != "" {
		s.Audit.PolicyFile = d.AuditPolicyFile
		s.Audit.LogOptions.Path = d.AuditLogPath
		s.Audit.LogOptions.MaxSize = d.AuditLogMaxSize
		s.Audit.LogOptions.MaxBackups = d.AuditLogMaxBackup
		s.Audit.LogOptions.Format = "json"
	}
}
