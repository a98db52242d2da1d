package e2e

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// crashLabel marks the ConfigMaps of the crash writers.
const crashLabel = "edgeplane-crash-writer"

// crashState is one version of an object: present with data at rv, or absent.
type crashState struct {
	exists bool
	data   map[string]string
	rv     uint64
}

func (s crashState) String() string {
	if !s.exists {
		return "absent"
	}
	return fmt.Sprintf("seq %s (rv %d)", s.data["seq"], s.rv)
}

// crashObject is one ConfigMap, written by a single writer only, so the
// order of its versions is the order of that writer's requests.
type crashObject struct {
	name    string
	cur     crashState  // last acknowledged (or verified after a restart) state
	pending *crashState // the write in flight when the server died: it may or may not have landed
	op      string      // pending's operation, for messages
}

// crashLedger records every acknowledged write of every writer.
type crashLedger struct {
	objects [][]*crashObject // objects[w] belong to writer w
	seq     []int            // last sequence number of writer w
	floor   uint64           // every write acknowledged after a restart must have a larger RV

	mu         sync.Mutex
	maxAcked   uint64   // largest resourceVersion acknowledged so far
	violations []string // ordering errors seen while writing
	notes      []string // requests that failed before the kill

	firstAck chan struct{} // closed at the cycle's first acknowledged write
	once     sync.Once
	acks     []atomic.Int64 // writes acknowledged to each writer this cycle
}

func newCrashLedger(writers, objects int) *crashLedger {
	l := &crashLedger{objects: make([][]*crashObject, writers), seq: make([]int, writers), acks: make([]atomic.Int64, writers)}
	for w := range writers {
		for k := range objects {
			l.objects[w] = append(l.objects[w], &crashObject{name: fmt.Sprintf("crash-w%d-%d", w, k)})
		}
	}
	return l
}

// crashCycle counts one write-and-kill cycle.
type crashCycle struct {
	acked     int
	unknown   int           // requests in flight at the kill (outcome unknown)
	failed    int           // requests that failed before the kill with an unknown outcome (crashMaxFailedBeforeKill)
	minWriter int           // fewest writes one writer got acknowledged
	ran       time.Duration // from the first acknowledged write to the kill
}

// crashFloorWait is how long past run the kill waits for the floors of
// acknowledged writes (crashMinAckedPerCycle, crashMinAckedPerWriter).
const crashFloorWait = 30 * time.Second

// writeAndKill runs the writers against s for run, and on until the floors
// of acknowledged writes are met (at most crashFloorWait longer), SIGKILLs
// s while they write and waits for every writer to see its server gone.
// Usually the floors are met well within run; on a loaded host the first
// writes after a start can be slower (seen: 13 writes in 634 ms, ~300 ms
// each, at load 15 on 2 cores), and a cycle killed then would fail the
// floors without anything having failed or stalled. A cycle whose writes do
// fail or stall still misses them, and crashLoop fails it.
func (l *crashLedger) writeAndKill(t *testing.T, s *server, seed, ds, cycle uint64, run time.Duration) crashCycle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	killed := make(chan struct{}) // closed once the SIGKILL is sent
	l.firstAck = make(chan struct{})
	l.once = sync.Once{}
	counts := make([]crashCycle, len(l.objects))
	var wg sync.WaitGroup
	for w := range l.objects {
		l.acks[w].Store(0)
		wg.Go(func() {
			counts[w] = l.write(ctx, s.client, w, crashRand(seed, ds, cycle, uint64(w)+1000), killed)
		})
	}
	// The kill comes run after the first acknowledged write, so that a slow
	// first request on a loaded machine never leaves a cycle without writes.
	select {
	case <-l.firstAck:
	case <-time.After(time.Minute):
		t.Fatal("no write acknowledged within a minute")
	case <-s.exited:
		t.Fatalf("edgeplane exited while the writers ran (%v):\n%s", s.exitErr, tail(s.output.String()))
	}
	began := time.Now()
	floorBy := began.Add(run + crashFloorWait)
	for wait := run; ; wait = 10 * time.Millisecond {
		select {
		case <-time.After(wait):
		case <-s.exited:
			t.Fatalf("edgeplane exited while the writers ran (%v):\n%s", s.exitErr, tail(s.output.String()))
		}
		if l.floorsMet() || time.Now().After(floorBy) {
			break
		}
	}
	ran := time.Since(began)
	close(killed)
	crashKill(t, s, "while writing")
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("writers still blocked 2 minutes after the kill")
	}
	l.mu.Lock()
	for _, v := range l.violations {
		t.Error(v)
	}
	for _, n := range l.notes {
		t.Log(n)
	}
	l.violations, l.notes = nil, nil
	l.mu.Unlock()
	sum := crashCycle{minWriter: counts[0].acked, ran: ran}
	for _, c := range counts {
		sum.acked += c.acked
		sum.unknown += c.unknown
		sum.failed += c.failed
		sum.minWriter = min(sum.minWriter, c.acked)
	}
	return sum
}

// write is writer w: creates, updates and deletes of its own ConfigMaps,
// one at a time, until the kill. A request that fails before the kill with
// an unknown outcome (a 5xx, a timeout) is noted and the writer keeps going
// on its other objects: that one stays in flight (pending) until the restart
// resolves it. The writer stops at the first failure after the kill, or
// when every one of its objects is in flight.
func (l *crashLedger) write(ctx context.Context, c *kubernetes.Clientset, w int, rng *rand.Rand, killed <-chan struct{}) crashCycle {
	cms := c.CoreV1().ConfigMaps("default")
	var res crashCycle
	var last uint64 // RV of this writer's previous acknowledged write
	usable := slices.Clone(l.objects[w])
	for len(usable) > 0 && ctx.Err() == nil {
		k := rng.IntN(len(usable))
		o := usable[k]
		l.seq[w]++
		data := map[string]string{
			"writer": strconv.Itoa(w),
			"seq":    strconv.Itoa(l.seq[w]),
			"pad":    crashPad(rng),
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: o.name, Namespace: "default", Labels: map[string]string{crashLabel: strconv.Itoa(w)}},
			Data:       data,
		}
		var got *corev1.ConfigMap
		var err error
		switch {
		case !o.cur.exists:
			o.op, o.pending = "create", &crashState{exists: true, data: data}
			got, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		case rng.IntN(100) < 15:
			rv := strconv.FormatUint(o.cur.rv, 10)
			o.op, o.pending = "delete", &crashState{}
			err = cms.Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		default:
			cm.ResourceVersion = strconv.FormatUint(o.cur.rv, 10)
			o.op, o.pending = "update", &crashState{exists: true, data: data}
			got, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			if crashRejected(err) {
				// A definite refusal: nothing was written, and nothing should have been refused.
				o.pending = nil
				l.violate("writer %d: %s %s (seq %d) refused: %v", w, o.op, o.name, l.seq[w], err)
			} else {
				select {
				case <-killed:
					res.unknown++
					return res
				default:
					res.failed++
					l.mu.Lock()
					l.notes = append(l.notes, fmt.Sprintf("writer %d: %s %s failed before the kill (outcome unknown; the writer goes on without it): %v", w, o.op, o.name, err))
					l.mu.Unlock()
				}
			}
			usable = slices.Delete(usable, k, k+1)
			continue
		}
		next := crashState{}
		if got != nil {
			rv, perr := strconv.ParseUint(got.ResourceVersion, 10, 64)
			if perr != nil {
				l.violate("writer %d: %s %s: resourceVersion %q is not an integer", w, o.op, o.name, got.ResourceVersion)
				return res
			}
			if !maps.Equal(got.Data, data) {
				l.violate("writer %d: %s %s answered data seq %s, sent seq %d", w, o.op, o.name, got.Data["seq"], l.seq[w])
			}
			switch {
			case rv <= l.floor:
				l.violate("writer %d: %s %s acknowledged at rv %d, not above rv %d acknowledged before the restart", w, o.op, o.name, rv, l.floor)
			case rv <= o.cur.rv:
				l.violate("writer %d: %s %s acknowledged at rv %d, not above its previous rv %d", w, o.op, o.name, rv, o.cur.rv)
			case rv <= last:
				l.violate("writer %d: %s %s acknowledged at rv %d, not above this writer's previous write at rv %d", w, o.op, o.name, rv, last)
			}
			last = rv
			next = crashState{exists: true, data: data, rv: rv}
			l.mu.Lock()
			l.maxAcked = max(l.maxAcked, rv)
			l.mu.Unlock()
		}
		o.cur, o.pending = next, nil
		res.acked++
		l.acks[w].Add(1)
		l.once.Do(func() { close(l.firstAck) })
	}
	return res
}

// floorsMet reports whether this cycle's acknowledged writes reach the
// floors, in all and for every writer.
func (l *crashLedger) floorsMet() bool {
	var all int64
	for w := range l.acks {
		n := l.acks[w].Load()
		if n < crashMinAckedPerWriter {
			return false
		}
		all += n
	}
	return all >= crashMinAckedPerCycle
}

// crashRejected reports a definite API refusal (the write did not happen),
// as opposed to a lost connection or a server error with unknown outcome.
func crashRejected(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	code := se.Status().Code
	return code >= 400 && code < 500 && code != 408 && code != 429
}

func (l *crashLedger) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

// crashPad is 32 to 256 random bytes, hex: payloads of varying size.
func crashPad(rng *rand.Rand) string {
	b := make([]byte, 32+rng.IntN(225))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return hex.EncodeToString(b)
}

// verify checks the restarted server s against the ledger and returns the
// number of acknowledged writes it lost. Each object must be in its last
// acknowledged state, or in the state of the write in flight at the kill;
// resourceVersions must not go back. Then the ledger adopts what the server
// holds (resolving the in-flight writes) for the next cycle.
func (l *crashLedger) verify(t *testing.T, s *server, what string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := s.client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: crashLabel})
	if err != nil {
		t.Fatalf("%s: list after restart: %v", what, err)
	}
	listRV, err := strconv.ParseUint(list.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("%s: list resourceVersion %q is not an integer", what, list.ResourceVersion)
	}
	if listRV < l.maxAcked {
		t.Errorf("%s: list resourceVersion %d after restart is below the largest acknowledged %d", what, listRV, l.maxAcked)
	}
	found := map[string]crashState{}
	for _, cm := range list.Items {
		rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s resourceVersion %q is not an integer", what, cm.Name, cm.ResourceVersion)
		}
		found[cm.Name] = crashState{exists: true, data: cm.Data, rv: rv}
	}
	lost := 0
	for _, objs := range l.objects {
		for _, o := range objs {
			got := found[o.name]
			delete(found, o.name)
			pend := "none"
			if o.pending != nil {
				pend = o.op + " to " + o.pending.String()
			}
			switch {
			case crashSame(got, o.cur):
				if got.exists && got.rv != o.cur.rv {
					t.Errorf("%s: %s holds its acknowledged %s at rv %d", what, o.name, o.cur, got.rv)
				}
			case o.pending != nil && crashSame(got, *o.pending):
				if got.exists && got.rv <= o.cur.rv {
					t.Errorf("%s: %s holds the in-flight %s at rv %d, not above the acknowledged rv %d", what, o.name, o.op, got.rv, o.cur.rv)
				}
			default:
				lost++
				t.Errorf("%s: %s is %s after the restart; acknowledged: %s, in flight at the kill: %s", what, o.name, got, o.cur, pend)
			}
			o.cur, o.pending = got, nil
		}
	}
	for name, st := range found {
		t.Errorf("%s: %s exists (%s) but no writer ever wrote it", what, name, st)
	}
	l.floor = listRV
	l.maxAcked = max(l.maxAcked, listRV)
	return lost
}

// crashSame compares an object's contents (not its resourceVersion).
func crashSame(a, b crashState) bool {
	if a.exists != b.exists {
		return false
	}
	return !a.exists || maps.Equal(a.data, b.data)
}
