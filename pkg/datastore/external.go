package datastore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// External datastore kinds, named by the scheme of Options.Endpoint.
const (
	TypeExternalEtcd = "external-etcd"
	TypePostgres     = "postgres"
)

// EndpointKind classifies a --datastore-endpoint: TypeExternalEtcd for
// http(s)://host:port[,...], TypePostgres for postgres(ql)://..., TypeSQLite
// for sqlite://path. Shared is true when other servers can use the same store.
func EndpointKind(endpoint string) (kind string, shared bool, err error) {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return "", false, fmt.Errorf("--datastore-endpoint %q: want https://host:2379[,...], postgres://... or sqlite://path", redact(endpoint))
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		for _, ep := range strings.Split(endpoint, ",") {
			u, err := url.Parse(strings.TrimSpace(ep))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
				return "", false, fmt.Errorf("--datastore-endpoint: %q is not an etcd URL such as https://10.0.0.1:2379", redact(strings.TrimSpace(ep)))
			}
		}
		return TypeExternalEtcd, true, nil
	case "postgres", "postgresql":
		if u, err := url.Parse(endpoint); err != nil || u.Host == "" {
			return "", false, fmt.Errorf("--datastore-endpoint %q: not a PostgreSQL URL such as postgres://user:password@host:5432/edgeplane", redact(endpoint))
		}
		return TypePostgres, true, nil
	case "sqlite":
		if rest == "" || strings.ContainsAny(rest, "?#%") {
			return "", false, fmt.Errorf("--datastore-endpoint %q: want sqlite:///absolute/path/state.db (no ?, # or %%)", endpoint)
		}
		return TypeSQLite, false, nil
	default:
		return "", false, fmt.Errorf("--datastore-endpoint %q: unknown scheme %q; want https, postgres or sqlite", redact(endpoint), scheme)
	}
}

// redact hides a password in a URL for messages, also in one that does not
// parse: then everything up to the last "@" after the scheme is hidden.
func redact(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.User != nil {
		return u.Redacted()
	}
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			return scheme + "://xxxxx@" + rest[i+1:]
		}
	}
	return endpoint
}

// validateEndpoint checks Options.Endpoint and its TLS files.
func (o *Options) validateEndpoint() []error {
	kind, _, err := EndpointKind(o.Endpoint)
	if err != nil {
		return []error{err}
	}
	var errs []error
	tls := o.EndpointCAFile != "" || o.EndpointCertFile != "" || o.EndpointKeyFile != ""
	if tls && kind != TypeExternalEtcd {
		errs = append(errs, errors.New("--datastore-cafile, --datastore-certfile and --datastore-keyfile apply to an etcd --datastore-endpoint only"))
	}
	if (o.EndpointCertFile == "") != (o.EndpointKeyFile == "") {
		errs = append(errs, errors.New("--datastore-certfile and --datastore-keyfile go together"))
	}
	for _, f := range []struct{ flag, path string }{
		{"--datastore-cafile", o.EndpointCAFile},
		{"--datastore-certfile", o.EndpointCertFile},
		{"--datastore-keyfile", o.EndpointKeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", f.flag, err))
		}
	}
	return errs
}

// newExternal returns the datastore for Options.Endpoint.
func newExternal(o Options, dbDir string) (Datastore, error) {
	kind, _, err := EndpointKind(o.Endpoint)
	if err != nil {
		return nil, err
	}
	switch kind {
	case TypeSQLite:
		_, rest, _ := strings.Cut(o.Endpoint, "://")
		path, err := filepath.Abs(rest)
		if err != nil {
			return nil, err
		}
		s, err := newKine(dbDir, o.sqliteSync(), o.SQLiteCommitWindow)
		if err != nil {
			return nil, err
		}
		s.dbPath = path
		return s, nil
	case TypePostgres:
		s, err := newKine(dbDir, o.sqliteSync(), o.SQLiteCommitWindow)
		if err != nil {
			return nil, err
		}
		s.dsn = o.Endpoint
		return s, nil
	}
	var eps []string
	for _, ep := range strings.Split(o.Endpoint, ",") {
		eps = append(eps, strings.TrimSpace(ep))
	}
	return &externalEtcd{client: ClientConfig{
		Endpoints: eps,
		CAFile:    o.EndpointCAFile, CertFile: o.EndpointCertFile, KeyFile: o.EndpointKeyFile,
	}}, nil
}

// externalEtcd is an etcd cluster run by someone else: Start only checks
// that it answers.
type externalEtcd struct {
	client ClientConfig

	mu      sync.Mutex
	stopped chan struct{}
}

var _ Datastore = (*externalEtcd)(nil)

func (s *externalEtcd) Name() string { return TypeExternalEtcd }

func (s *externalEtcd) Client() ClientConfig { return s.client }

func (s *externalEtcd) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = make(chan struct{})
	klog.FromContext(ctx).Info("Using an external etcd", "endpoints", s.client.Endpoints)
	return nil
}

func (s *externalEtcd) Ready(ctx context.Context) error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped == nil {
		return errors.New("datastore: external etcd not started")
	}
	return waitForGet(ctx, s.client, stopped)
}

func (s *externalEtcd) Stop(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped != nil {
		close(s.stopped)
		s.stopped = nil
	}
	return nil
}

// NewClient returns an etcd3 client for cc (a started datastore's Client()).
func NewClient(cc ClientConfig, lg logr.Logger) (*clientv3.Client, error) {
	return newClient(cc, lg)
}
