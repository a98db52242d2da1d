package datastore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/k3s-io/kine/pkg/broadcaster"
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
// commitFeed lets a write's own event go out as soon as it commits. A
// create's event needs nothing the writer does not have: its key, value and
// lease, and its revision as both create and mod revision (no previous
// value). An update's or a delete's event carries the create revision and
// the previous value, which SQLite copies into the new row inside the insert
// (kine's old_value column): the writer reads its row back by revision (a
// primary-key lookup) once it has committed. Gap fills and compaction do not
// go through Append and still come from the polling loop.
//
// Every event counts: the merge sends in revision order, so before this an
// update (a leader-election lease renewed every 2 s) held back every create
// committed after it until the polling loop came round, the tail of watch
// delivery under a create load (docs/PERFORMANCE.md).
//
// The polling loop stays the authority. The feed merges both sources into one
// stream in revision order, with each revision once: a create's event goes
// out when every revision before it has gone out; until then it waits for
// the polling loop, whose batches cover every revision up to their current
// revision (fills included), and whatever the loop delivers first is not
// sent again. Writes are queued on one token (sqlitewrites.go), so SQLite
// assigns revisions in commit order and rows never become visible out of it.
type commitFeed struct {
	logstructured.Log // kine's SQL log

	writes  writeTokens
	current func(context.Context) (int64, error) // the database's last revision
	// row reads the event stored at a revision, as the polling loop reads it
	// (storedEvents).
	row func(ctx context.Context, rev int64) (*server.Event, error)
	ctx context.Context // the backend's, from Start
	bc  broadcaster.Broadcaster

	// watching: a merge runs; before that commits are not offered.
	watching atomic.Bool
	commits  chan *server.Event
	// atCommit counts the events sent from commits, not the polling loop.
	atCommit atomic.Int64
}

// commitQueue is how many committed creates may wait for the merge. When it
// is full a create is left to the polling loop, which delivers it anyway.
const commitQueue = 1024

func newCommitFeed(log logstructured.Log, writes writeTokens, current func(context.Context) (int64, error), row func(context.Context, int64) (*server.Event, error)) *commitFeed {
	return &commitFeed{Log: log, writes: writes, current: current, row: row, commits: make(chan *server.Event, commitQueue)}
}

func (f *commitFeed) Start(ctx context.Context) error {
	f.ctx = ctx
	return f.Log.Start(ctx)
}

// Watch subscribes to the merged stream, starting it for the first
// subscriber, as kine's log does with its polling loop.
func (f *commitFeed) Watch(ctx context.Context) <-chan server.EventBatch {
	return f.bc.Watch(ctx, f.startMerge)
}

// startMerge subscribes to kine's polling loop and starts the merge at the
// database's current revision. New writes wait for the write token
// meanwhile, so the loop (which starts at the revision it reads) and the
// merge start at the same one.
func (f *commitFeed) startMerge() (chan server.EventBatch, error) {
	if f.ctx == nil {
		return nil, errors.New("datastore: watch before the log started")
	}
	if err := f.writes.take(f.ctx); err != nil {
		return nil, err
	}
	polled := f.Log.Watch(f.ctx)
	rev, err := f.current(f.ctx)
	if err == nil && polled != nil {
		f.watching.Store(true)
	}
	f.writes.give()
	if err != nil {
		return nil, err
	}
	if polled == nil {
		return nil, errors.New("datastore: kine's watch did not start")
	}
	out := make(chan server.EventBatch)
	go func() {
		defer close(out)
		m := merger{delivered: rev}
		for {
			var b server.EventBatch
			select {
			case pb, ok := <-polled:
				if !ok {
					f.watching.Store(false)
					return
				}
				b = m.polled(pb)
			case e := <-f.commits:
				b = m.committed(e)
				f.atCommit.Add(int64(len(b.Events)))
			}
			if len(b.Events) > 0 {
				out <- b
			}
		}
	}()
	return out, nil
}

// Append is kine's append; a write that stored a row is offered to the merge
// once it has committed.
func (f *commitFeed) Append(ctx context.Context, event *server.Event) (int64, error) {
	rev, err := f.Log.Append(ctx, event)
	if err != nil || rev <= 0 || !f.watching.Load() {
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
	select {
	case f.commits <- e:
	default:
	}
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

// merger orders committed creates and the polling loop's batches into one
// stream. delivered is the last revision sent or known to need nothing sent
// (a fill, or one a batch covered).
type merger struct {
	delivered int64
	waiting   map[int64]*server.Event // committed creates ahead of delivered+1
}

// committed takes a committed create and returns what can go out now.
func (m *merger) committed(e *server.Event) server.EventBatch {
	rev := e.KV.ModRevision
	switch {
	case rev <= m.delivered:
		return server.EventBatch{}
	case rev > m.delivered+1:
		if m.waiting == nil {
			m.waiting = map[int64]*server.Event{}
		}
		m.waiting[rev] = e
		return server.EventBatch{}
	}
	m.delivered = rev
	return m.release([]*server.Event{e})
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

// release appends the waiting creates that now follow delivered.
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
