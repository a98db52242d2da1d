package datastore

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// testContext returns a context carrying a per-test klog logger and a deadline.
func testContext(t *testing.T) context.Context {
	t.Helper()
	lg := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1)))
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), lg), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testOptions(t *testing.T, typ, dataDir string) Options {
	t.Helper()
	o := Options{Type: typ, DataDir: dataDir}
	if typ == TypeEtcd {
		p := newTestPKI(t, t.TempDir())
		o.EtcdCAFile, o.EtcdServerCertFile, o.EtcdServerKeyFile = p.CA, p.ServerCert, p.ServerKey
		o.EtcdClientCertFile, o.EtcdClientKeyFile = p.ClientCert, p.ClientKey
	}
	return o
}

// startReady creates, starts and readies a datastore and stops it on cleanup.
func startReady(ctx context.Context, t *testing.T, o Options) Datastore {
	t.Helper()
	ds, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := ds.Stop(context.Background()); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
	})
	start := time.Now()
	if err := ds.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := ds.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	t.Logf("%s ready after %v", ds.Name(), time.Since(start))
	return ds
}

func testClient(ctx context.Context, t *testing.T, cc ClientConfig) *clientv3.Client {
	t.Helper()
	cli, err := newClient(cc, klog.FromContext(ctx).WithName("test-client"))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestRoundTrip(t *testing.T) {
	for _, typ := range []string{TypeSQLite, TypeEtcd} {
		t.Run(typ, func(t *testing.T) {
			ctx := testContext(t)
			o := testOptions(t, typ, t.TempDir())
			ds := startReady(ctx, t, o)
			if ds.Name() != typ {
				t.Errorf("Name() = %q, want %q", ds.Name(), typ)
			}
			cc := ds.Client()
			wantScheme := map[string]string{TypeSQLite: "unix://", TypeEtcd: "https://127.0.0.1:"}[typ]
			if len(cc.Endpoints) != 1 || !strings.HasPrefix(cc.Endpoints[0], wantScheme) {
				t.Fatalf("Client().Endpoints = %v, want one %s endpoint", cc.Endpoints, wantScheme)
			}
			cli := testClient(ctx, t, cc)
			const key = "/registry/test/key"

			put, err := cli.Put(ctx, key, "v1")
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			rev := put.Header.Revision
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			wch := cli.Watch(wctx, key, clientv3.WithRev(rev))

			get, err := cli.Get(ctx, key)
			if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v1" {
				t.Fatalf("Get = %v, %v; want v1", get, err)
			}

			// Create-if-absent must fail: the key exists.
			txn, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, "nope")).
				Else(clientv3.OpGet(key)).Commit()
			if err != nil || txn.Succeeded {
				t.Fatalf("create txn: succeeded=%v err=%v, want failure", txn != nil && txn.Succeeded, err)
			}
			// Compare-and-swap on the current revision succeeds.
			txn, err = cli.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, "v2")).
				Else(clientv3.OpGet(key)).Commit()
			if err != nil || !txn.Succeeded {
				t.Fatalf("update txn: succeeded=%v err=%v, want success", txn != nil && txn.Succeeded, err)
			}

			var seen []string
			for len(seen) < 2 {
				select {
				case wr, ok := <-wch:
					if !ok {
						t.Fatalf("watch closed after %v", seen)
					}
					if err := wr.Err(); err != nil {
						t.Fatalf("watch: %v", err)
					}
					for _, ev := range wr.Events {
						seen = append(seen, string(ev.Kv.Value))
					}
				case <-ctx.Done():
					t.Fatalf("watch saw %v before deadline, want [v1 v2]", seen)
				}
			}
			if seen[0] != "v1" || seen[1] != "v2" {
				t.Errorf("watch events = %v, want [v1 v2]", seen)
			}
			wcancel()
			cli.Close()

			if err := ds.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if err := ds.Stop(ctx); err != nil {
				t.Fatalf("second Stop: %v", err)
			}

			// A new process on the same data dir sees the data.
			ds2 := startReady(ctx, t, o)
			cli2 := testClient(ctx, t, ds2.Client())
			get, err = cli2.Get(ctx, key)
			if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v2" {
				t.Fatalf("Get after restart = %v, %v; want v2", get, err)
			}
			cli2.Close()
			if err := ds2.Stop(ctx); err != nil {
				t.Fatalf("Stop after restart: %v", err)
			}

			// The same instance can be started again after Stop.
			if err := ds2.Start(ctx); err != nil {
				t.Fatalf("Start same instance again: %v", err)
			}
			if err := ds2.Ready(ctx); err != nil {
				t.Fatalf("Ready same instance again: %v", err)
			}
		})
	}
}

func TestStopInAnyState(t *testing.T) {
	for _, typ := range []string{TypeSQLite, TypeEtcd} {
		for _, start := range []bool{false, true} {
			name := typ + "/never started"
			if start {
				name = typ + "/right after Start"
			}
			t.Run(name, func(t *testing.T) {
				ctx := testContext(t)
				ds, err := New(testOptions(t, typ, t.TempDir()))
				if err != nil {
					t.Fatal(err)
				}
				if start {
					if err := ds.Start(ctx); err != nil {
						t.Fatalf("Start: %v", err)
					}
				}
				for i := 0; i < 2; i++ {
					if err := ds.Stop(ctx); err != nil {
						t.Fatalf("Stop #%d: %v", i+1, err)
					}
				}
				if err := ds.Ready(ctx); err == nil {
					t.Fatal("Ready after Stop succeeded")
				}
			})
		}
	}
}

func TestStartTwice(t *testing.T) {
	ctx := testContext(t)
	ds := startReady(ctx, t, testOptions(t, TypeSQLite, t.TempDir()))
	if err := ds.Start(ctx); err == nil {
		t.Fatal("second Start succeeded")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want []string // substrings, one per expected error
	}{
		{name: "default is sqlite", o: Options{DataDir: "/var/lib/edgeplane"}},
		{name: "sqlite", o: Options{Type: "sqlite", DataDir: "/d"}},
		{name: "etcd with TLS", o: Options{Type: "etcd", DataDir: "/d",
			EtcdCAFile: "ca", EtcdServerCertFile: "s.crt", EtcdServerKeyFile: "s.key",
			EtcdClientCertFile: "c.crt", EtcdClientKeyFile: "c.key"}},
		{name: "unknown type", o: Options{Type: "foo", DataDir: "/d"},
			want: []string{`--datastore "foo" is not one of: sqlite, etcd`}},
		{name: "etcd without TLS", o: Options{Type: "etcd", DataDir: "/d"},
			want: []string{"CA certificate", "server certificate", "server key", "client certificate", "client key"}},
		{name: "all problems at once", o: Options{Type: "foo"},
			want: []string{`"foo" is not one of`, "--data-dir must not be empty"}},
		{name: "sqlite data dir with URI characters", o: Options{DataDir: "/d?x"},
			want: []string{"not supported with the sqlite datastore"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := tt.o.Validate()
			if len(errs) != len(tt.want) {
				t.Fatalf("Validate() = %v, want %d errors", errs, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], w)
				}
			}
			_, err := New(tt.o)
			if (err != nil) != (len(tt.want) > 0) {
				t.Errorf("New() error = %v, want error: %v", err, len(tt.want) > 0)
			}
			for _, e := range errs {
				if !strings.Contains(err.Error(), e.Error()) {
					t.Errorf("New() error %v does not report %v", err, e)
				}
			}
		})
	}
}
