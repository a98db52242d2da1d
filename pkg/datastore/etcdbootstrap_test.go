package datastore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/pkg/v3/pbutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
)

// interruptedBootstrap leaves <dataDir>/db/etcd the way a kill leaves it
// between etcd creating its WAL and saving the first raft entries: a WAL
// holding only its metadata, so a restart has no voting member.
func interruptedBootstrap(t *testing.T, dataDir string) {
	t.Helper()
	walDir := filepath.Join(dataDir, "db", "etcd", "member", "wal")
	if err := os.MkdirAll(filepath.Dir(walDir), 0o700); err != nil {
		t.Fatal(err)
	}
	id, cid := uint64(0x8e9e05c52164694d), uint64(0xcdf818194e3a8c32)
	meta := pbutil.MustMarshalMessage(&etcdserverpb.Metadata{NodeID: &id, ClusterID: &cid})
	w, err := wal.Create(zap.NewNop(), walDir, meta)
	if err != nil {
		t.Fatalf("creating the WAL: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// A first start killed after etcd created its WAL restarts as a fresh member,
// and the member is marked once ready.
func TestEtcdInterruptedBootstrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(testContext(t), 30*time.Second)
	defer cancel()
	dataDir := t.TempDir()
	interruptedBootstrap(t, dataDir)
	ds := startReady(ctx, t, testOptions(t, TypeEtcd, dataDir))

	if _, err := os.Stat(filepath.Join(dataDir, "db", "etcd", bootstrappedMarker)); err != nil {
		t.Errorf("marker after ready: %v", err)
	}
	cli := testClient(ctx, t, ds.Client())
	if _, err := cli.Put(ctx, "/registry/test/after-recovery", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

// A member that has been ready once is never started afresh: with the marker
// present the broken WAL stays, the member is not ready, and Stop still
// returns (embed.Etcd.Close alone waits for ever on a member never ready).
func TestEtcdMarkedMemberIsKept(t *testing.T) {
	ctx := testContext(t)
	dataDir := t.TempDir()
	interruptedBootstrap(t, dataDir)
	marker := filepath.Join(dataDir, "db", "etcd", bootstrappedMarker)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wal := filepath.Join(dataDir, "db", "etcd", "member", "wal")
	before, err := os.ReadDir(wal)
	if err != nil {
		t.Fatal(err)
	}

	ds, err := New(testOptions(t, TypeEtcd, dataDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := ds.Ready(readyCtx); err == nil {
		t.Errorf("Ready on a member without voters succeeded")
	}
	stopCtx, cancelStop := context.WithTimeout(ctx, 15*time.Second)
	defer cancelStop()
	if err := ds.Stop(stopCtx); err != nil {
		t.Fatalf("Stop of a member never ready: %v", err)
	}
	after, err := os.ReadDir(wal)
	if err != nil || len(after) != len(before) || after[0].Name() != before[0].Name() {
		t.Errorf("WAL of a marked member changed: before %v, after %v (%v)", before, after, err)
	}
}

// Data written before the marker existed (an older edgeplane) survives a
// restart: a member holding keys is never started afresh.
func TestEtcdUnmarkedMemberWithKeysIsKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(testContext(t), 60*time.Second)
	defer cancel()
	dataDir := t.TempDir()
	o := testOptions(t, TypeEtcd, dataDir)
	const key = "/registry/test/kept"

	ds := startReady(ctx, t, o)
	cli := testClient(ctx, t, ds.Client())
	if _, err := cli.Put(ctx, key, "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	cli.Close()
	if err := ds.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := os.Remove(filepath.Join(dataDir, "db", "etcd", bootstrappedMarker)); err != nil {
		t.Fatal(err)
	}

	ds2 := startReady(ctx, t, o)
	get, err := testClient(ctx, t, ds2.Client()).Get(ctx, key)
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v" {
		t.Fatalf("Get after restart without marker = %v, %v; want v", get, err)
	}
}
