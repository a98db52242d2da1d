package datastore

import (
	"bytes"
	"context"
	"errors"

	"github.com/k3s-io/kine/pkg/logstructured"
	"github.com/k3s-io/kine/pkg/server"
)

// createRevisionFix corrects what kine (v0.17.5) answers to a create.
//
// LogStructured.Create shadows its rev variable on the path that re-creates
// a key that existed before and was deleted, and returns the datastore's
// current revision instead of the revision of the row it inserted. The API
// server takes that number as the new object's resourceVersion, so the
// client gets an RV the object never had, and its next update or delete with
// that RV is refused as a conflict (found by test/e2e/crash_test.go;
// docs/reliability/crash.md). On the same path a create whose insert the
// database refused (disk full, read-only file) is answered as a success.
//
// On SQLite the log under kine's backend is wrapped in appendRecorder, which
// hands the revision of each row the create inserts back to it: the answer
// is then that revision, and a create that inserted nothing stored nothing.
// kine's PostgreSQL driver does not expose its log, so there the key is read
// back after the create.
type createRevisionFix struct {
	server.Backend
	// recorded: the backend's log is wrapped in appendRecorder.
	recorded bool
	// feed is the SQLite log's watch feed (sqlitewatch.go), nil elsewhere.
	feed *commitFeed
}

func (b createRevisionFix) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	rev, _, err := b.createVerified(ctx, key, value, lease)
	return rev, err
}

// createVerified is Create that also says whether the create is known to
// have stored the key. A create that returned no error but did not store it
// is one the database refused.
func (b createRevisionFix) createVerified(ctx context.Context, key string, value []byte, lease int64) (int64, bool, error) {
	var (
		rev    int64
		stored bool
		err    error
	)
	if b.recorded {
		rec := &appendRecord{}
		rev, err = b.Backend.Create(context.WithValue(ctx, appendRecordKey{}, rec), key, value, lease)
		if err == nil && rec.rev != 0 {
			rev, stored = rec.rev, true
		}
	} else {
		rev, stored, err = b.createReadBack(ctx, key, value, lease)
	}
	if errors.Is(err, server.ErrKeyExists) {
		rev = b.existingRevision(ctx, key, rev)
	}
	return rev, stored, err
}

// existingRevision is the revision to answer a create refused because key
// exists. kine answers the revision its polling loop last saw, which can be
// older than the key's own when other writers commit at the same time; its
// Put then reads the key at that revision, finds nothing and dereferences
// the nil key (a panic, seen in TestWatchHub's churn). The datastore's
// current revision, read with the key, is at least the key's.
func (b createRevisionFix) existingRevision(ctx context.Context, key string, rev int64) int64 {
	current, kv, err := b.Backend.Get(ctx, key, 0, true)
	if err == nil && kv != nil && current > rev {
		return current
	}
	return rev
}

// appendRecorder is kine's log with one addition: an append that stored a
// row reports its revision to the appendRecord in its context, if any.
type appendRecorder struct{ logstructured.Log }

type appendRecordKey struct{}

// appendRecord receives the revision of the last row a create inserted.
// Only the create's own goroutine touches it.
type appendRecord struct{ rev int64 }

func (l appendRecorder) Append(ctx context.Context, event *server.Event) (int64, error) {
	rev, err := l.Log.Append(ctx, event)
	if rec, ok := ctx.Value(appendRecordKey{}).(*appendRecord); ok && err == nil && rev > 0 {
		rec.rev = rev
	}
	return rev, err
}

// createReadBack reads the key back after a successful create: the revision
// that created its current incarnation is the right answer when that
// incarnation holds the value just written (the API server's values carry
// the object's UID, so another incarnation never matches). When it was
// written again since, or the read fails, the key read as of the answered
// revision tells a stored create (live there) from a refused one (absent or
// deleted there).
func (b createRevisionFix) createReadBack(ctx context.Context, key string, value []byte, lease int64) (int64, bool, error) {
	rev, err := b.Backend.Create(ctx, key, value, lease)
	if err != nil {
		return rev, false, err
	}
	_, kv, gerr := b.Backend.Get(ctx, key, 0, false)
	if gerr == nil && kv != nil && kv.CreateRevision != 0 && kv.ModRevision != kv.CreateRevision {
		// Written again since: read the creating revision itself.
		_, kv, gerr = b.Backend.Get(ctx, key, kv.CreateRevision, false)
	}
	if gerr == nil && kv != nil && kv.CreateRevision == kv.ModRevision && bytes.Equal(kv.Value, value) {
		return kv.ModRevision, true, nil
	}
	if rev == 0 {
		return rev, false, nil
	}
	_, kv, gerr = b.Backend.Get(ctx, key, rev, true)
	// Compacted already or the read failed: no evidence of a lost write.
	return rev, gerr != nil || kv != nil, nil
}
