package datastore

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/k3s-io/kine/pkg/logstructured"
	"github.com/k3s-io/kine/pkg/logstructured/sqllog"
	"github.com/k3s-io/kine/pkg/server"
)

// kine (v0.17.5) delivers every watch event from one polling loop: each
// committed write wakes it, and it reads the rows after the last revision it
// saw back from the database (a range query joined with each row's previous
// value) before it passes them on. Under write load that query, and waiting
// for the loop to come round to it, is the tail of watch delivery on SQLite,
// where etcd hands a commit to its watchers at once (docs/PERFORMANCE.md).
//
// commitFeed hands a write's own event to the watch hub as soon as it
// commits, from the writer's goroutine, before the write's answer goes back:
// etcd, too, notifies its watchers inside the write that made the event. A
// create's event needs nothing the writer does not have: its key, value and
// lease, and its revision as both create and mod revision (no previous
// value). An update's or a delete's event carries the create revision and
// the previous value, which SQLite copies into the new row inside the insert
// (kine's old_value column): the writer reads its row back by revision (a
// primary-key lookup) once it has committed. Gap fills and compaction do not
// go through Append and still come from the polling loop.
//
// The polling loop stays the authority: the hub merges what writers offer
// with the loop's batches in revision order, each revision once (merger), so
// an event a writer could not offer (its context ended before the read-back,
// or no hub listens yet) still goes out, from the loop.
type commitFeed struct {
	logstructured.Log // kine's SQL log

	// row reads the event stored at a revision, as the polling loop reads it
	// (storedEvents).
	row func(ctx context.Context, rev int64) (*server.Event, error)
	// offer, once set (offerTo), is handed each committed write's event.
	offer atomic.Pointer[func(*server.Event)]
}

func newCommitFeed(log logstructured.Log, row func(context.Context, int64) (*server.Event, error)) *commitFeed {
	return &commitFeed{Log: log, row: row}
}

// offerTo hands every write that commits from now on to offer, in the
// writer's goroutine. Writes commit in revision order (their token,
// sqlitewrites.go) but may be offered out of it.
func (f *commitFeed) offerTo(offer func(*server.Event)) { f.offer.Store(&offer) }

// Append is kine's append; a write that stored a row is offered once it has
// committed.
func (f *commitFeed) Append(ctx context.Context, event *server.Event) (int64, error) {
	rev, err := f.Log.Append(ctx, event)
	offer := f.offer.Load()
	if err != nil || rev <= 0 || offer == nil {
		return rev, err
	}
	var e *server.Event
	if event.Create {
		e = &server.Event{Create: true, KV: &server.KeyValue{
			Key:            event.KV.Key,
			Value:          event.KV.Value,
			CreateRevision: rev,
			ModRevision:    rev,
			Lease:          event.KV.Lease,
		}}
	} else if e, _ = f.row(ctx, rev); e == nil {
		// Not read (the request's context ended, or compaction took the row
		// already): the polling loop delivers it.
		return rev, err
	}
	(*offer)(e)
	return rev, err
}

// storedRowSQL reads one row by revision (a primary-key lookup) in the columns
// of the polling loop's query, for kine's own row mapping; the current and
// compact revisions it also reads are not needed here.
var storedRowSQL = fmt.Sprintf("SELECT 0, 0, %s FROM kine WHERE id = ?", generic.WithOldVal)

// storedEvents reads the event stored at a revision as the polling loop
// builds it (sqllog.RowsToEvents).
func storedEvents(db *sql.DB) func(context.Context, int64) (*server.Event, error) {
	return func(ctx context.Context, rev int64) (*server.Event, error) {
		rows, err := db.QueryContext(ctx, storedRowSQL, rev)
		if err != nil {
			return nil, err
		}
		batch, _, err := sqllog.RowsToEvents(rows, true, true)
		if err != nil {
			return nil, err
		}
		if len(batch.Events) != 1 {
			return nil, fmt.Errorf("datastore: revision %d is not stored", rev)
		}
		return batch.Events[0], nil
	}
}

// merger orders the writes offered at commit and the polling loop's batches
// into one stream. delivered is the last revision sent or known to need
// nothing sent (a fill, or one a batch covered).
type merger struct {
	delivered int64
	waiting   map[int64]*server.Event // committed writes ahead of delivered+1
}

// maxWaiting bounds the committed writes that wait for the revisions before
// them; beyond it a write is left to the polling loop, which delivers it
// anyway.
const maxWaiting = 1024

// committed takes a committed write and returns what can go out now.
func (m *merger) committed(e *server.Event) server.EventBatch {
	rev := e.KV.ModRevision
	switch {
	case rev <= m.delivered:
		return server.EventBatch{}
	case rev > m.delivered+1:
		if m.waiting == nil {
			m.waiting = map[int64]*server.Event{}
		}
		if len(m.waiting) < maxWaiting {
			m.waiting[rev] = e
		}
		return server.EventBatch{}
	}
	m.delivered = rev
	return m.release([]*server.Event{e})
}

// skipTo drops what waits and goes on from rev (or delivered, if later):
// the events in between are not sent.
func (m *merger) skipTo(rev int64) {
	m.delivered = max(m.delivered, rev)
	clear(m.waiting)
}

// polled takes a batch of the polling loop: its events in revision order,
// and every revision up to its current revision accounted for.
func (m *merger) polled(b server.EventBatch) server.EventBatch {
	var events []*server.Event
	for _, e := range b.Events {
		if e.KV.ModRevision > m.delivered {
			events = append(events, e)
		}
	}
	if n := len(events); n > 0 {
		m.delivered = events[n-1].KV.ModRevision
	}
	m.delivered = max(m.delivered, b.CurrentRev)
	for rev := range m.waiting {
		if rev <= m.delivered {
			delete(m.waiting, rev)
		}
	}
	return m.release(events)
}

// release appends the waiting writes that now follow delivered.
func (m *merger) release(events []*server.Event) server.EventBatch {
	for {
		e, ok := m.waiting[m.delivered+1]
		if !ok {
			break
		}
		delete(m.waiting, m.delivered+1)
		events = append(events, e)
		m.delivered++
	}
	return server.EventBatch{CurrentRev: m.delivered, Events: events}
}
