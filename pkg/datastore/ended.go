package datastore

import (
	"errors"
	"sync"
)

// ended records that a running datastore stopped on its own: done is closed
// on the first end, and get returns that end's error. The bootstrap watches
// it (Done, Err) to stop the process instead of running on without a store.
type ended struct {
	once sync.Once
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func newEnded() *ended { return &ended{done: make(chan struct{})} }

// end records err (the first one wins) and closes done.
func (e *ended) end(err error) {
	e.once.Do(func() {
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
		close(e.done)
	})
}

// get is the recorded error, nil until done is closed.
func (e *ended) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// faultBreaker is a datastore that can break itself for InjectFault.
type faultBreaker interface{ breakServing() error }

// InjectFault, for tests of what happens when the datastore dies under a
// running server, breaks d from inside: kine's socket is closed, embedded
// etcd's server is stopped. It is not reachable from the shipped command
// line; the server calls it only when a test sets the environment variable
// the bootstrap names (pkg/bootstrap/fault.go).
func InjectFault(d Datastore) error {
	b, ok := d.(faultBreaker)
	if !ok {
		return errors.New("datastore: " + d.Name() + " cannot inject a fault")
	}
	return b.breakServing()
}
