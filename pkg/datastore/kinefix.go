package datastore

import (
	"bytes"
	"context"

	"github.com/k3s-io/kine/pkg/server"
)

// createRevisionFix corrects the revision kine (v0.17.5) answers to a create
// of a key that existed before and was deleted: LogStructured.Create shadows
// its rev variable on that path and returns the datastore's current revision
// instead of the revision of the row it inserted. The API server takes that
// number as the new object's resourceVersion, so the client gets an RV the
// object never had, and its next update or delete with that RV is refused as
// a conflict (found by test/e2e/crash_test.go; docs/reliability/crash.md).
//
// After a successful create the key is read back: the revision that created
// its current incarnation is the right answer when that incarnation holds the
// value just written (the API server's values carry the object's UID, so
// another incarnation never matches).
type createRevisionFix struct{ server.Backend }

func (b createRevisionFix) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	rev, _, err := b.createVerified(ctx, key, value, lease)
	return rev, err
}

// createVerified is Create that also says whether the read-back found this
// write's own incarnation of the key (same value, created at the answered
// revision). A create kine refused without an error is never found: the
// API server's values carry the object's UID, so no other incarnation
// holds the same bytes.
func (b createRevisionFix) createVerified(ctx context.Context, key string, value []byte, lease int64) (int64, bool, error) {
	rev, err := b.Backend.Create(ctx, key, value, lease)
	if err != nil {
		return rev, false, err
	}
	_, kv, gerr := b.Backend.Get(ctx, key, 0, false)
	if gerr != nil || kv == nil || kv.CreateRevision == 0 {
		return rev, false, nil
	}
	if kv.ModRevision != kv.CreateRevision {
		// Written again since: read the creating revision itself.
		if _, kv, gerr = b.Backend.Get(ctx, key, kv.CreateRevision, false); gerr != nil || kv == nil {
			return rev, false, nil
		}
	}
	if kv.CreateRevision == kv.ModRevision && bytes.Equal(kv.Value, value) {
		return kv.ModRevision, true, nil
	}
	return rev, false, nil
}
