package datastore

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/logstructured"
	"github.com/k3s-io/kine/pkg/logstructured/sqllog"
	"github.com/k3s-io/kine/pkg/server"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Canaries of the kine v0.17.5 bugs that kinefix.go and sqliteguard.go work
// around (docs/RELIABILITY.md, "Workarounds"). Each runs kine's own backend,
// without edgeplane's fixes, on a real SQLite file, and makes the bug's
// condition happen for certain through kine's Log interface (the seam kine
// itself offers): a write by another client between a create's insert and
// kine's answer, or an insert the database refuses. Each fails once the
// pinned kine answers correctly: then delete the workaround and its canary.

// canaryLog is kine's SQL log with two hooks on Append.
type canaryLog struct {
	logstructured.Log
	// after runs after an append that stored a row (kine's log answers a
	// conflicting insert with revision 0 and no error); it may write.
	after func(ctx context.Context, event *server.Event)
	// refuse makes Append fail as a full or read-only database does.
	refuse func(event *server.Event) bool
}

var errDiskFull = errors.New("database or disk is full")

func (l *canaryLog) Append(ctx context.Context, event *server.Event) (int64, error) {
	if l.refuse != nil && l.refuse(event) {
		return 0, errDiskFull
	}
	rev, err := l.Log.Append(ctx, event)
	if err == nil && rev > 0 && l.after != nil {
		l.after(ctx, event)
	}
	return rev, err
}

// startRawKine starts kine's backend over a new SQLite file with log wrapped
// by canaryLog, and nothing of edgeplane's.
func startRawKine(t *testing.T) (context.Context, *logstructured.LogStructured, *canaryLog) {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	dsn := filepath.Join(t.TempDir(), sqliteFile) + "?" + sqliteParams
	cfg := &drivers.Config{
		Endpoint:         "sqlite://" + dsn,
		Scheme:           "sqlite",
		DataSourceName:   dsn,
		CompactTimeout:   5 * time.Second,
		CompactMinRetain: 1000,
		CompactBatchSize: 1000,
		PollBatchSize:    500,
		PollInterval:     time.Second,
	}
	_, dialect, err := sqlite.NewVariant(ctx, &wg, "sqlite3", cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := &canaryLog{Log: sqllog.New(dialect, &wg, cfg)}
	backend := logstructured.New(log)
	if err := backend.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx, backend, log
}

// TestCanaryKineCreateRevision: re-creating a deleted key answers kine's
// current revision, not the revision of the row the create inserted
// (kinefix.go). Another key written right after the insert makes the two
// differ.
func TestCanaryKineCreateRevision(t *testing.T) {
	ctx, kine, log := startRawKine(t)
	const key = "/registry/configmaps/default/canary"
	rev, err := kine.Create(ctx, key, []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, deleted, err := kine.Delete(ctx, key, rev); err != nil || !deleted {
		t.Fatalf("delete: deleted=%v err=%v", deleted, err)
	}
	var once sync.Once
	log.after = func(ctx context.Context, event *server.Event) {
		if event.Create && event.KV.Key == key {
			once.Do(func() {
				other, err := log.Log.Append(ctx, &server.Event{Create: true, KV: &server.KeyValue{Key: "/registry/configmaps/default/other", Value: []byte("x")}, PrevKV: &server.KeyValue{}})
				if err != nil {
					t.Errorf("the other client's write: %v", err)
					return
				}
				// kine's current revision is what its polling loop has
				// seen: wait until that is the other write.
				err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
					cur, err := log.Log.CurrentRevision(ctx)
					return err == nil && cur >= other, nil
				})
				if err != nil {
					t.Errorf("kine's polling loop did not reach revision %d: %v", other, err)
				}
			})
		}
	}
	answered, err := kine.Create(ctx, key, []byte("v2"), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, kv, err := kine.Get(ctx, key, 0, false)
	if err != nil || kv == nil {
		t.Fatalf("get: %v %v", kv, err)
	}
	if answered == kv.CreateRevision {
		t.Fatalf("kine answered the re-create with its row's revision %d: the bug kinefix.go works around is gone; remove createRevisionFix's read-back and this canary", answered)
	}
	t.Logf("kine answered %d for a row created at %d (bug present)", answered, kv.CreateRevision)
}

// TestCanaryKineRefusedWrites: a create or an update the database refuses is
// not an error in kine (sqliteguard.go): a refused create is answered as a
// success, a refused update as a compare failure (which the API server
// retries as a conflict until its request times out).
func TestCanaryKineRefusedWrites(t *testing.T) {
	ctx, kine, log := startRawKine(t)
	const key = "/registry/configmaps/default/refused"
	rev, err := kine.Create(ctx, key, []byte("v1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	log.refuse = func(*server.Event) bool { return true }
	for _, tc := range []struct {
		name  string
		write func() (ok bool, err error)
	}{
		{"create", func() (bool, error) {
			_, err := kine.Create(ctx, "/registry/configmaps/default/never-stored", []byte("v"), 0)
			return err == nil, err
		}},
		{"update", func() (bool, error) {
			_, _, updated, err := kine.Update(ctx, key, []byte("v2"), rev, 0)
			// A compare failure at the key's current revision: the write was refused.
			return !updated, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			silent, err := tc.write()
			if err != nil {
				t.Fatalf("kine now reports the refused %s (%v): the bug sqliteguard.go works around is gone; remove the guard and this canary", tc.name, err)
			}
			if !silent {
				t.Fatalf("kine's answer to a refused %s changed; see whether sqliteguard.go is still needed", tc.name)
			}
		})
	}
}
