package procfs

import (
	"sync"
	"time"
)

// Sampler reads a value (a process's RSS, the sum over a few processes) now,
// every interval from a goroutine, and once more when stopped, and keeps the
// highest and the latest reading. A failed read is skipped.
type Sampler struct {
	read      func() (int64, error)
	mu        sync.Mutex
	max, last int64
	stopCh    chan struct{}
	done      chan struct{}
}

// NewSampler starts sampling read every interval.
func NewSampler(read func() (int64, error), interval time.Duration) *Sampler {
	s := &Sampler{read: read, stopCh: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stopCh:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

// RSSSampler samples pid's VmRSS.
func RSSSampler(pid int, interval time.Duration) *Sampler {
	return NewSampler(func() (int64, error) { return RSS(pid) }, interval)
}

func (s *Sampler) sample() {
	v, err := s.read()
	if err != nil {
		return
	}
	s.mu.Lock()
	s.max, s.last = max(s.max, v), v
	s.mu.Unlock()
}

// Current is the latest reading.
func (s *Sampler) Current() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Peak is the highest reading so far.
func (s *Sampler) Peak() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max
}

// Stop ends sampling after one last reading and returns the highest and the
// latest.
func (s *Sampler) Stop() (peak, last int64) {
	close(s.stopCh)
	<-s.done
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.last
}
