package bootstrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/internal/atomicfile"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/chain"
	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/encryption"
	"github.com/edgeplane/edgeplane/pkg/rawstore"
	"github.com/edgeplane/edgeplane/pkg/snapshot"
)

// encryptionReloadPoll is how often the API server re-reads the encryption
// configuration (upstream: a minute). Reading one small file is cheap, and
// `edgeplane secrets-encrypt rotate-keys` waits for two reloads.
const encryptionReloadPoll = 10 * time.Second

// certOptions are the options of certs.Ensure, at start and for renewals
// while running: both must agree, or renewals would change the SANs.
func certOptions(o CompletedOptions, port int) certs.Options {
	return certs.Options{
		Dir:                 filepath.Join(o.DataDir, "tls"),
		KubeconfigDir:       o.DataDir,
		Hostname:            o.Hostname,
		ExtraSANs:           o.TLSSANs,
		AdvertiseAddress:    o.AdvertiseAddress,
		ServiceCIDR:         o.ServiceCIDR,
		ClusterDomain:       o.ClusterDomain,
		APIServerPort:       port,
		APIServerHost:       localServerHost(o.BindAddress),
		AdminKubeconfigMode: o.KubeconfigMode,
		LeafValidity:        o.Day2.LeafValidity,
		EtcdPeerSANs:        o.Cluster.etcdCluster(),
	}
}

// prepareDay2 writes what the API server chain reads for secrets encryption
// and auditing, before it starts.
func prepareDay2(ctx context.Context, o CompletedOptions) (chain.Day2, error) {
	logger := klog.FromContext(ctx)
	var d chain.Day2
	if o.Day2.SecretsEncryption {
		path := encryption.Path(o.DataDir)
		created, err := encryption.Ensure(path, time.Now())
		if err != nil {
			return d, err
		}
		if created {
			logger.Info("Created the secrets encryption key; back it up with the data dir, snapshots need it", "config", path)
		}
		d.EncryptionConfigFile, d.EncryptionReloadPoll = path, encryptionReloadPoll
	} else {
		logger.Info("Secrets are stored unencrypted (--secrets-encryption=false)")
	}
	if o.Day2.AuditLogPath != "" {
		policy := o.Day2.AuditPolicyFile
		if policy == "" {
			var err error
			if policy, err = writeAuditPolicy(filepath.Join(o.DataDir, "config")); err != nil {
				return d, err
			}
		}
		d.AuditLogPath, d.AuditPolicyFile = o.Day2.AuditLogPath, policy
		d.AuditLogMaxSize, d.AuditLogMaxBackup = o.Day2.AuditLogMaxSize, o.Day2.AuditLogMaxBackup
	}
	if lv := o.Day2.LeafValidity; lv > 0 {
		// Test-only short certificates: client-go checks file-based client
		// certificates for changes every 5 minutes, longer than they live.
		d.ClientCertRefresh = max(lv/10, time.Second)
		logger.Info("Short leaf certificate lifetime for tests", "lifetime", lv, "env", certs.LeafLifetimeEnv)
	}
	return d, nil
}

// startDay2 starts, after the API server, the certificate renewal loop, the
// snapshot schedule and the expiry metric.
func (s *server) startDay2(ctx context.Context, o CompletedOptions, port int, storage datastore.ClientConfig) error {
	certs.RegisterExpirationMetric(s.pki)
	// An external datastore is not ours to snapshot; the members of an
	// embedded etcd cluster (--cluster-init, --server) are.
	shared := o.sharedDatastore() && !o.Cluster.etcdCluster()
	if !shared && o.Datastore == datastore.TypeEtcd && len(storage.Endpoints) > 0 {
		if err := s.mgr.Start(ctx, &endpointFile{path: filepath.Join(o.DataDir, "db", rawstore.EndpointFile), url: storage.Endpoints[0]}, stopTimeout); err != nil {
			return err
		}
	}
	renewer := certs.NewRenewer(certOptions(o, port), 0, func(ctx context.Context, _ []string) {
		// The same writer as start-up's, which may not have written yet.
		if err := s.kubeconfig.write(); err != nil {
			klog.FromContext(ctx).Error(err, "Updating --write-kubeconfig after a renewal")
		}
	})
	if err := s.mgr.Start(ctx, renewer, stopTimeout); err != nil {
		return err
	}
	if o.Day2.SnapshotSchedule == "" {
		return nil
	}
	if shared {
		// The datastore is not ours to copy: back it up where it runs.
		klog.FromContext(ctx).Info("Scheduled snapshots are off with a shared datastore (--datastore-endpoint)")
		return nil
	}
	if o.Cluster.DatastoreEndpoint != "" { // sqlite:///path: not under <data-dir>/db
		klog.FromContext(ctx).Info("Scheduled snapshots are off with --datastore-endpoint")
		return nil
	}
	sched, err := snapshot.NewScheduler(snapshot.SchedulerOptions{
		Schedule:  o.Day2.SnapshotSchedule,
		Retention: o.Day2.SnapshotRetention,
		Dir:       snapshot.Dir(o.DataDir),
		Open: func(ctx context.Context) (*rawstore.Store, error) {
			return rawstore.Open(ctx, rawstore.Options{DataDir: o.DataDir, Kind: o.Datastore, Running: true, Etcd: &storage})
		},
	})
	if err != nil {
		return err
	}
	return s.mgr.Start(ctx, sched, stopTimeout)
}

// endpointFile publishes the embedded etcd's client URL for the commands
// that reach it while the server runs (snapshot save, secrets-encrypt).
type endpointFile struct{ path, url string }

func (e *endpointFile) Name() string { return "etcd-endpoint-file" }

func (e *endpointFile) Start(context.Context) error {
	// Durably, so that the file is never torn after a power cut (its URL
	// is stale until the next start either way: the port changes).
	if _, err := atomicfile.Write(e.path, []byte(e.url+"\n"), 0o600); err != nil {
		return err
	}
	return nil
}

func (e *endpointFile) Ready(context.Context) error { return nil }

func (e *endpointFile) Stop(context.Context) error {
	if err := os.Remove(e.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
