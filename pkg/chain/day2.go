package chain

import (
	"time"

	encryptionconfigcontroller "k8s.io/apiserver/pkg/server/options/encryptionconfig/controller"
	"k8s.io/client-go/transport"
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

	// Two process-wide upstream settings, which the chain sets because it is
	// the only API server in the process (0 leaves upstream's default):
	// EncryptionReloadPoll is how often the API server re-reads
	// EncryptionConfigFile (upstream: a minute);
	EncryptionReloadPoll time.Duration
	// ClientCertRefresh is how often client-go re-reads file-based client
	// certificates (upstream: 5 minutes), for certificates that live less.
	ClientCertRefresh time.Duration
}

// applyDay2 sets the upstream options for d.
func applyDay2(s *options.ServerRunOptions, d Day2) {
	if d.EncryptionConfigFile != "" {
		s.Etcd.EncryptionProviderConfigFilepath = d.EncryptionConfigFile
		s.Etcd.EncryptionProviderConfigAutomaticReload = true
		if d.EncryptionReloadPoll > 0 {
			// A variable upstream exports for this.
			encryptionconfigcontroller.EncryptionConfigFileChangePollDuration = d.EncryptionReloadPoll
		}
	}
	if d.ClientCertRefresh > 0 {
		transport.CertCallbackRefreshDuration = d.ClientCertRefresh
	}
	if d.AuditLogPath != "" {
		s.Audit.PolicyFile = d.AuditPolicyFile
		s.Audit.LogOptions.Path = d.AuditLogPath
		s.Audit.LogOptions.MaxSize = d.AuditLogMaxSize
		s.Audit.LogOptions.MaxBackups = d.AuditLogMaxBackup
		s.Audit.LogOptions.Format = "json"
	}
}
