package datastore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/k3s-io/kine/pkg/server"
)

// writeGuard wraps kine's backend to make failed writes visible.
//
// kine (v0.17) turns a write its database refuses (disk full, read-only
// file, I/O error) into something else: Create returns the current revision
// with no error, which its etcd bridge answers as a successful create, so
// the API server acknowledges an object that was never stored; Update and Delete
// report a compare failure, which the API server retries as a conflict until
// the request times out. The guard turns these into errors, remembers that
// writes are failing, and then fails the API server's datastore health probe
// (a Get of "<prefix>/health") until a probe write goes through again, so
// /readyz turns unready while writes fail and ready again on its own. While
// writes succeed it adds no writes of its own.
type writeGuard struct {
	// The guard's creates go through the revision fix, which knows whether
	// a create stored its key (kinefix.go).
	createRevisionFix
	log logr.Logger

	mu       sync.Mutex
	failing  error     // nil while writes succeed
	probedAt time.Time // last probe while failing
	probeErr error     // its result
}

// errWriteNotStored is what a refused write returns instead of kine's silent answers.
var errWriteNotStored = errors.New("datastore: the database did not store the write (disk full, read-only or failing storage?)")

const (
	// writeProbeKey is outside the API server's /registry prefix, so no
	// watch sees it.
	writeProbeKey = "/edgeplane/datastore-write-probe"
	// writeProbeEvery bounds probe writes while writes are failing.
	writeProbeEvery = time.Second
)

func newWriteGuard(b createRevisionFix, log logr.Logger) *writeGuard {
	return &writeGuard{createRevisionFix: b, log: log}
}

func (g *writeGuard) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	rev, stored, err := g.createVerified(ctx, key, value, lease)
	if err == nil && !stored {
		err = errWriteNotStored
	}
	g.observe(ctx, key, err)
	return rev, err
}

func (g *writeGuard) Update(ctx context.Context, key string, value []byte, revision, lease int64) (int64, *server.KeyValue, bool, error) {
	rev, kv, ok, err := g.Backend.Update(ctx, key, value, revision, lease)
	// A real conflict returns the newer revision; the one asked for means
	// the write itself failed.
	if err == nil && !ok && kv != nil && kv.ModRevision == revision {
		err = errWriteNotStored
	}
	g.observe(ctx, key, err)
	return rev, kv, ok, err
}

func (g *writeGuard) Delete(ctx context.Context, key string, revision int64) (int64, *server.KeyValue, bool, error) {
	rev, kv, ok, err := g.Backend.Delete(ctx, key, revision)
	if err == nil && !ok && kv != nil && kv.ModRevision == revision {
		err = errWriteNotStored
	}
	g.observe(ctx, key, err)
	return rev, kv, ok, err
}

// Get fails the API server's health probe while writes are failing.
func (g *writeGuard) Get(ctx context.Context, key string, revision int64, keysOnly bool) (int64, *server.KeyValue, error) {
	// The probe's key is path.Join("/", prefix, "health"): "/registry/health".
	if strings.HasSuffix(key, "/health") && strings.Count(key, "/") == 2 {
		if err := g.healthy(ctx); err != nil {
			return 0, nil, err
		}
	}
	return g.Backend.Get(ctx, key, revision, keysOnly)
}

// observe records the outcome of a write.
func (g *writeGuard) observe(ctx context.Context, key string, err error) {
	if err != nil && (errors.Is(err, server.ErrKeyExists) || errors.Is(err, server.ErrCompacted) ||
		errors.Is(err, server.ErrFutureRev) || ctx.Err() != nil) {
		return // the caller's doing, not the database's
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err != nil && g.failing == nil:
		g.failing, g.probedAt, g.probeErr = err, time.Now(), err
		g.log.Error(err, "Datastore write failed; reporting not ready until writes succeed again", "key", key)
	case err == nil && g.failing != nil:
		g.failing = nil
		g.log.Info("Datastore writes succeed again")
	}
}

// healthy returns nil while writes succeed; while they fail it probes with a
// write (at most every writeProbeEvery) and returns the probe's error.
func (g *writeGuard) healthy(ctx context.Context) error {
	g.mu.Lock()
	if g.failing == nil {
		g.mu.Unlock()
		return nil
	}
	if time.Since(g.probedAt) < writeProbeEvery {
		err := g.probeErr
		g.mu.Unlock()
		return fmt.Errorf("datastore: writes are failing: %w", err)
	}
	g.probedAt = time.Now()
	g.mu.Unlock()

	err := g.probe(ctx)
	g.mu.Lock()
	g.probeErr = err
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("datastore: writes are failing: %w", err)
	}
	return nil
}

// probe writes and deletes writeProbeKey through the guard, so success
// clears the failing state.
func (g *writeGuard) probe(ctx context.Context) error {
	rev, err := g.Create(ctx, writeProbeKey, []byte(time.Now().UTC().Format(time.RFC3339)), 0)
	if errors.Is(err, server.ErrKeyExists) {
		// Left behind by a probe whose delete failed.
		var kv *server.KeyValue
		if _, kv, err = g.Backend.Get(ctx, writeProbeKey, 0, true); err == nil && kv != nil {
			rev = kv.ModRevision
		}
	}
	if err != nil {
		return err
	}
	_, _, _, err = g.Delete(ctx, writeProbeKey, rev)
	return err
}
