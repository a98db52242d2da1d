package bootstrap

import (
	"errors"
	"strings"
	"testing"
)

func TestClusterOptionsComplete(t *testing.T) {
	token := "K10" + strings.Repeat("ab", 32) + "::server:0123456789abcdef"
	tests := []struct {
		name       string
		mutate     func(o *ClusterOptions)
		wantShared bool
		wantEtcd   bool
		wantErr    string
	}{
		{name: "defaults"},
		{name: "postgres", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint = "postgres://u:p@db:5432/edgeplane" }, wantShared: true},
		{name: "external etcd", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint = "https://10.0.0.1:2379,https://10.0.0.2:2379" }, wantShared: true},
		{name: "explicit sqlite", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint = "sqlite:///var/lib/x/state.db" }},
		{name: "unknown scheme", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint = "mysql://db" }, wantErr: `unknown scheme "mysql"`},
		{name: "etcd without port", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint = "https://10.0.0.1" }, wantErr: "not an etcd URL"},
		{name: "password hidden", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint = "postgres://u:secret@/db" }, wantErr: "xxxxx"},
		{name: "TLS files for postgres", mutate: func(o *ClusterOptions) {
			o.DatastoreEndpoint, o.DatastoreCAFile = "postgres://db:5432/x", "/etc/hosts"
		}, wantErr: "apply to an etcd --datastore-endpoint only"},
		{name: "TLS files without endpoint", mutate: func(o *ClusterOptions) { o.DatastoreCAFile = "/etc/hosts" }, wantErr: "need --datastore-endpoint"},
		{name: "missing CA file", mutate: func(o *ClusterOptions) {
			o.DatastoreEndpoint, o.DatastoreCAFile = "https://10.0.0.1:2379", "/nonexistent/ca.crt"
		}, wantErr: "--datastore-cafile"},
		{name: "cert without key", mutate: func(o *ClusterOptions) {
			o.DatastoreEndpoint, o.DatastoreCertFile = "https://10.0.0.1:2379", "/etc/hosts"
		}, wantErr: "go together"},
		{name: "token with postgres", mutate: func(o *ClusterOptions) { o.DatastoreEndpoint, o.Token = "postgres://db:5432/x", token }, wantShared: true},
		{name: "token alone", mutate: func(o *ClusterOptions) { o.Token = token }, wantErr: "--token needs a shared datastore"},
		{name: "bad token", mutate: func(o *ClusterOptions) {
			o.DatastoreEndpoint, o.Token = "postgres://db:5432/x", "K10abc::server:0123456789abcdef"
		}, wantErr: "--token: token CA hash"},
		{name: "cluster init", mutate: func(o *ClusterOptions) { o.ClusterInit = true }, wantShared: true, wantEtcd: true},
		{name: "join", mutate: func(o *ClusterOptions) { o.Server, o.Token = "https://10.0.0.1:6443", token }, wantShared: true, wantEtcd: true},
		{name: "join without token", mutate: func(o *ClusterOptions) { o.Server = "https://10.0.0.1:6443" }, wantErr: "--server needs the cluster's --token"},
		{name: "join over http", mutate: func(o *ClusterOptions) { o.Server, o.Token = "http://10.0.0.1:6443", token }, wantErr: "want https://host:port"},
		{name: "init and join", mutate: func(o *ClusterOptions) { o.ClusterInit, o.Server, o.Token = true, "https://10.0.0.1:6443", token }, wantErr: "pass only one"},
		{name: "init with endpoint", mutate: func(o *ClusterOptions) { o.ClusterInit, o.DatastoreEndpoint = true, "postgres://db:5432/x" }, wantErr: "do not go with --datastore-endpoint"},
		{name: "same etcd ports", mutate: func(o *ClusterOptions) { o.ClusterInit, o.EtcdPeerPort = true, 2379 }, wantErr: "must differ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newClusterOptions()
			if tc.mutate != nil {
				tc.mutate(&o)
			}
			c, errs := o.complete()
			if tc.wantErr != "" {
				if err := errors.Join(errs...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("errors %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(errors.Join(errs...).Error(), "secret@") {
					t.Fatalf("error shows the password: %v", errs)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			if c.Shared != tc.wantShared || c.etcdCluster() != tc.wantEtcd {
				t.Fatalf("Shared=%v etcdCluster=%v, want %v %v", c.Shared, c.etcdCluster(), tc.wantShared, tc.wantEtcd)
			}
		})
	}
}
