package bootstrap

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/spf13/pflag"

	"github.com/edgeplane/edgeplane/pkg/datastore"
	"github.com/edgeplane/edgeplane/pkg/join"
)

// ClusterOptions are the flags for running more than one server: a shared
// external datastore and the join token.
type ClusterOptions struct {
	DatastoreEndpoint string
	DatastoreCAFile   string
	DatastoreCertFile string
	DatastoreKeyFile  string
	Token             string
	// ClusterInit starts a new embedded etcd cluster; Server joins one.
	ClusterInit    bool
	Server         string
	EtcdClientPort int
	EtcdPeerPort   int
}

func newClusterOptions() ClusterOptions {
	return ClusterOptions{EtcdClientPort: 2379, EtcdPeerPort: 2380}
}

// AddFlags binds the options to fs.
func (o *ClusterOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DatastoreEndpoint, "datastore-endpoint", o.DatastoreEndpoint, "External datastore, overriding --datastore: https://host:2379[,...] (etcd), postgres://user:password@host:5432/db (PostgreSQL through kine) or sqlite:///path/state.db. Servers on one etcd or PostgreSQL datastore form one cluster.")
	fs.StringVar(&o.DatastoreCAFile, "datastore-cafile", o.DatastoreCAFile, "CA certificate that signs the external etcd's serving certificates.")
	fs.StringVar(&o.DatastoreCertFile, "datastore-certfile", o.DatastoreCertFile, "Client certificate for the external etcd.")
	fs.StringVar(&o.DatastoreKeyFile, "datastore-keyfile", o.DatastoreKeyFile, "Client key for the external etcd.")
	fs.BoolVar(&o.ClusterInit, "cluster-init", o.ClusterInit, "Start a new embedded etcd cluster that other servers join with --server and --token.")
	fs.StringVar(&o.Server, "server", o.Server, "Join the embedded etcd cluster of the server at this URL (https://host:6443); needs --token.")
	fs.IntVar(&o.EtcdClientPort, "etcd-client-port", o.EtcdClientPort, "Client port of this server's etcd member, with --cluster-init or --server.")
	fs.IntVar(&o.EtcdPeerPort, "etcd-peer-port", o.EtcdPeerPort, "Peer port of this server's etcd member, with --cluster-init or --server.")
	fs.StringVar(&o.Token, "token", o.Token, "Cluster join token (K10<ca-hash>::server:<secret>, or a secret of your choice on the first server); `edgeplane token` prints it. Generated and kept in <data-dir>/token when not given.")
}

// clusterCompleted holds the checked ClusterOptions.
type clusterCompleted struct {
	ClusterOptions
	// Token is the parsed --token; nil when none was given.
	Token *join.Token
	// Shared is true when other servers may use the same datastore.
	Shared bool
}

// complete parses the options and reports every problem.
func (o ClusterOptions) complete() (clusterCompleted, []error) {
	c := clusterCompleted{ClusterOptions: o}
	var errs []error
	if o.DatastoreEndpoint != "" {
		_, shared, err := datastore.EndpointKind(o.DatastoreEndpoint)
		if err != nil {
			errs = append(errs, err)
		} else {
			c.Shared = shared
			ds := datastore.Options{
				DataDir:  "unused",
				Endpoint: o.DatastoreEndpoint, EndpointCAFile: o.DatastoreCAFile,
				EndpointCertFile: o.DatastoreCertFile, EndpointKeyFile: o.DatastoreKeyFile,
			}
			errs = append(errs, ds.Validate()...)
		}
	} else if o.DatastoreCAFile != "" || o.DatastoreCertFile != "" || o.DatastoreKeyFile != "" {
		errs = append(errs, errors.New("--datastore-cafile, --datastore-certfile and --datastore-keyfile need --datastore-endpoint"))
	}
	if o.Token != "" {
		t, err := join.ParseToken(o.Token)
		if err != nil {
			errs = append(errs, fmt.Errorf("--token: %w", err))
		} else {
			c.Token = &t
		}
		if !c.Shared && !o.ClusterInit && o.Server == "" {
			errs = append(errs, errors.New("--token needs a shared datastore (--datastore-endpoint https://... or postgres://...), --cluster-init or --server"))
		}
	}
	if o.ClusterInit || o.Server != "" {
		c.Shared = true
		switch {
		case o.ClusterInit && o.Server != "":
			errs = append(errs, errors.New("--cluster-init starts a new cluster and --server joins one: pass only one"))
		case o.DatastoreEndpoint != "":
			errs = append(errs, errors.New("--cluster-init and --server run an embedded etcd cluster: they do not go with --datastore-endpoint"))
		case o.Server != "" && o.Token == "":
			errs = append(errs, errors.New("--server needs the cluster's --token (`edgeplane token` on one of its servers prints it)"))
		}
		if o.Server != "" {
			if u, err := url.Parse(o.Server); err != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" {
				errs = append(errs, fmt.Errorf("--server %q: want https://host:port", o.Server))
			}
		}
		cl := datastore.EtcdCluster{Name: "x", Host: "127.0.0.1", ClientPort: o.EtcdClientPort, PeerPort: o.EtcdPeerPort}
		errs = append(errs, cl.Validate()...)
	}
	return c, errs
}

// etcdCluster is true with --cluster-init or --server.
func (c clusterCompleted) etcdCluster() bool { return c.ClusterInit || c.Server != "" }

// sharedDatastore is true when other API servers may use the same datastore.
func (c *completedOptions) sharedDatastore() bool { return c.Cluster.Shared }
