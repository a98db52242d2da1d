package component

import (
	"context"
	"errors"
	"sync"
)

// ErrEndedOnItsOwn is a component's end when it stopped without an error
// and without being asked to.
var ErrEndedOnItsOwn = errors.New("stopped on its own")

// Status is the readiness and the end of a component that works in the
// background: it marks itself ready once it does its job, and ends when
// its work fails. Embedded in a component, it makes the component an Ender
// (Done, Err), so that its end takes the node or the process down instead
// of leaving a part that looks alive and does nothing. The zero value is
// ready to use.
type Status struct {
	mu    sync.Mutex
	ready chan struct{}
	done  chan struct{}
	err   error
}

func (s *Status) init() {
	if s.ready == nil {
		s.ready, s.done = make(chan struct{}), make(chan struct{})
	}
}

// MarkReady says the component does its job; later calls do nothing.
func (s *Status) MarkReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// End says the component stopped on its own because of err (nil:
// ErrEndedOnItsOwn); only the first call counts. A component that stops
// because it was asked to does not call End.
func (s *Status) End(err error) {
	if err == nil {
		err = ErrEndedOnItsOwn
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	select {
	case <-s.done:
	default:
		s.err = err
		close(s.done)
	}
}

// WaitReady blocks until the component is ready (nil), has ended (its
// error), or ctx ends.
func (s *Status) WaitReady(ctx context.Context) error {
	s.mu.Lock()
	s.init()
	ready, done := s.ready, s.done
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	default:
	}
	select {
	case <-ready:
		return nil
	case <-done:
		return s.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the component has ended on its own.
func (s *Status) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	return s.done
}

// Err is why the component ended; nil while it runs.
func (s *Status) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
