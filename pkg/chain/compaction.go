package chain

import (
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Upstream's compactor (etcd3.StartCompactorPerEndpoint) compacts every
// interval to the revision it saw at the interval before, and records each
// pass by writing the compact_rev_key through a version-compared
// transaction, which is how several API servers on one datastore share the
// work. On an idle cluster that record is the only write: every interval it
// writes the key (a new revision) and compacts the previous record away, so
// an edge host's flash sees a write every five minutes forever, for nothing.
//
// quietCompactor runs upstream's pass (etcd3.Compact, the same transaction)
// on the same schedule, and skips a pass only when it would change nothing
// but its own record: the revision has not moved since this compactor's own
// last record, and everything before that record is compacted already. A
// continue token or watch revision therefore expires within two intervals,
// as upstream promises, unless it was issued at the record's own revision on
// an idle datastore; then nothing has changed since it was issued and the
// list it continues is still consistent.
//
// Upstream's compactor still runs with a zero interval: then it only
// watches compact_rev_key (with ListFromCacheSnapshot), so that the watch
// cache learns of compactions made by other API servers.
type quietCompactor struct {
	key  string
	refs int // guarded by quietCompactors

	client   *clientv3.Client
	interval time.Duration
	watcher  stoppableCompactor

	mu        sync.Mutex
	compacted int64

	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

// compactionProbeKey is read, never written, to learn the datastore's
// current revision (the response header's).
const compactionProbeKey = "/registry/edgeplane.io/compaction-probe"

// quietCompactors holds the running compactors by datastore endpoints:
// the three servers of the chain each build their storage, and, as
// upstream's StartCompactorPerEndpoint does, one datastore gets one
// compactor.
var quietCompactors = struct {
	sync.Mutex
	byEndpoints map[string]*quietCompactor
}{byEndpoints: map[string]*quietCompactor{}}

// startQuietCompactor returns the compactor of the datastore at endpoints,
// starting it on a client of its own (from newClient, closed by the last
// Stop) if there is none; each call is matched by one Stop.
func startQuietCompactor(endpoints []string, newClient func() (*clientv3.Client, error), interval time.Duration) (*quietCompactor, error) {
	key := strings.Join(endpoints, ",")
	quietCompactors.Lock()
	defer quietCompactors.Unlock()
	if c := quietCompactors.byEndpoints[key]; c != nil {
		c.refs++
		return c, nil
	}
	client, err := newClient()
	if err != nil {
		return nil, err
	}
	c := &quietCompactor{
		key:      key,
		refs:     1,
		client:   client,
		interval: interval,
		watcher:  etcd3.NewCompactor(client, 0, clock.RealClock{}, nil),
		stop:     make(chan struct{}),
	}
	quietCompactors.byEndpoints[key] = c
	c.wg.Go(c.run)
	return c, nil
}

// CompactRevision implements etcd3.Compactor: the newest compaction this
// compactor made or its watcher saw.
func (c *quietCompactor) CompactRevision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.compacted, c.watcher.CompactRevision())
}

// Stop ends the loop and the watcher once every user has called it.
func (c *quietCompactor) Stop() {
	quietCompactors.Lock()
	c.refs--
	last := c.refs == 0
	if last {
		delete(quietCompactors.byEndpoints, c.key)
	}
	quietCompactors.Unlock()
	if !last {
		return
	}
	c.stopOnce.Do(func() {
		close(c.stop)
		c.wg.Wait()
		c.watcher.Stop()
		_ = c.client.Close()
	})
}

func (c *quietCompactor) run() {
	ctx := wait.ContextForChannel(c.stop)
	logger := klog.Background().WithName("compaction")
	var state compactionState
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if state.mayBeQuiet() {
			resp, err := c.client.Get(ctx, compactionProbeKey, clientv3.WithCountOnly())
			if err != nil {
				logger.Error(err, "Reading the datastore's revision failed")
				continue
			}
			if state.quiet(resp.Header.Revision) {
				logger.V(5).Info("Nothing to compact", "revision", resp.Header.Revision)
				continue
			}
		}
		version, rev, compacted, err := etcd3.Compact(ctx, c.client, state.version, state.rev)
		if err != nil {
			logger.Error(err, "Compaction failed", "endpoints", c.client.Endpoints())
			continue
		}
		state.passed(version, rev, compacted)
		if compacted != 0 {
			c.mu.Lock()
			c.compacted = max(c.compacted, compacted)
			c.mu.Unlock()
			logger.V(4).Info("Compacted", "revision", compacted)
		}
	}
}

// compactionState is what one compactor remembers between passes.
type compactionState struct {
	// version and rev are what etcd3.Compact returned last: the record's
	// version, and the datastore's revision after the pass (the revision
	// the next pass compacts to).
	version, rev int64
	// compacted is the newest revision compacted to, by this compactor or
	// (when the record was another server's) by the server that made it.
	compacted int64
}

// passed takes in the result of etcd3.Compact.
func (s *compactionState) passed(version, rev, compacted int64) {
	s.version, s.rev = version, rev
	s.compacted = max(s.compacted, compacted)
}

// mayBeQuiet says whether a pass could be skipped: everything before the
// last record is compacted already.
func (s *compactionState) mayBeQuiet() bool {
	return s.rev != 0 && s.compacted >= s.rev-1
}

// quiet says whether a pass can be skipped at the datastore's current
// revision: it has not moved since the last record, which is all a pass
// would compact to.
func (s *compactionState) quiet(current int64) bool {
	return s.mayBeQuiet() && current == s.rev
}
