package procfs

import (
	"sync"
	"testing"
	"time"
)

func TestSamplerPeak(t *testing.T) {
	var mu sync.Mutex
	values := []int64{5, 9, 3, 7}
	read := func() (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		v := values[0]
		if len(values) > 1 {
			values = values[1:]
		}
		return v, nil
	}
	s := NewSampler(read, time.Millisecond)
	for {
		mu.Lock()
		n := len(values)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	peak, _ := s.Stop()
	if peak != 9 {
		t.Fatalf("peak %d, want 9", peak)
	}
}
