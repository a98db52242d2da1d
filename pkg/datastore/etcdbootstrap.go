package datastore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	bolt "go.etcd.io/bbolt"
)

// A new etcd member creates its WAL, then saves the raft entries that make it
// the cluster's one voter. A process killed between the two (SIGKILL, power
// loss a moment after the first start) leaves a WAL with only its metadata: on
// restart etcd rebuilds its voters from the backend, finds none, and waits for
// an election that never comes ("failed to publish local member to cluster
// through raft" for ever). etcd cannot tell this apart from a member that lost
// its cluster, so edgeplane records the difference itself: a marker file
// written once the member has been ready. A lone member whose directory has no
// marker and no keys was never bootstrapped; there is nothing in it to lose,
// and it is started afresh.

// bootstrappedMarker is created in <data-dir>/db/etcd once the member served.
const bootstrappedMarker = "edgeplane-bootstrapped"

// recoverInterruptedBootstrap removes the member directory of a lone member
// whose first start did not finish. It keeps anything that has ever been
// ready or holds a key, and anything it cannot read.
func (s *etcdStore) recoverInterruptedBootstrap(lg logr.Logger) error {
	if s.opts.Cluster != nil {
		return nil // a member of a cluster bootstraps from its peers (etcdcluster.go)
	}
	memberDir := filepath.Join(s.dir, "member")
	if _, err := os.Stat(memberDir); errors.Is(err, fs.ErrNotExist) {
		return nil // first start
	} else if err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, bootstrappedMarker)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("datastore: %w", err)
	}
	keys, err := backendKeys(filepath.Join(memberDir, "snap", "db"))
	if err != nil {
		// Leave the directory to etcd, which reports what is wrong with it.
		lg.V(vInfo).Info("Not checking for an interrupted first start", "err", err)
		return nil
	}
	if keys > 0 {
		return nil // data written by an earlier edgeplane, before the marker existed
	}
	lg.Info("The first start of embedded etcd was interrupted before it finished; starting it afresh",
		"dir", memberDir)
	if err := os.RemoveAll(memberDir); err != nil {
		return fmt.Errorf("datastore: removing the unfinished etcd member %s: %w", memberDir, err)
	}
	return nil
}

// backendKeys counts the keys in etcd's backend file; a missing file has none.
func backendKeys(path string) (int, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", path, err)
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("key")); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n, err
}

// markBootstrapped records that the member has been ready once. The marker
// is written once, not synced: losing it to a crash only makes the next
// start look for keys again, and a member with none has nothing to lose.
func (s *etcdStore) markBootstrapped() error {
	path := filepath.Join(s.dir, bootstrappedMarker)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("datastore: %w", err)
	}
	_, err = f.WriteString("etcd member bootstrapped by edgeplane; do not remove\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("datastore: writing %s: %w", path, err)
	}
	return nil
}
