package certs

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// jumpClock is a wall clock the test moves; the Renewer's ticker stays on
// the real monotonic clock, as it does in the server when the wall clock
// jumps.
type jumpClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *jumpClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// logSink collects the error lines a component logs.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) context(ctx context.Context) context.Context {
	return klog.NewContext(ctx, funcr.New(func(prefix, args string) {
		s.mu.Lock()
		s.lines = append(s.lines, prefix+" "+args)
		s.mu.Unlock()
	}, funcr.Options{}))
}

// take returns and forgets the lines collected so far.
func (s *logSink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.lines
	s.lines = nil
	return out
}

// clockTreeHash hashes every certificate and key file of p.
func clockTreeHash(t *testing.T, p *PKI) string {
	t.Helper()
	h := sha256.New()
	for _, e := range p.Entries() {
		for _, f := range []string{e.Pair.Cert, e.Pair.Key} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// verifyAllAt checks that every leaf verifies against its CA at now, for its
// usages, and that none starts after now (clients on this clock would reject
// it as not yet valid).
func verifyAllAt(t *testing.T, p *PKI, now time.Time) {
	t.Helper()
	for _, e := range p.Entries() {
		if e.CA == nil {
			continue
		}
		ca, leaf := loadCert(t, e.CA.Cert), loadCert(t, e.Pair.Cert)
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: leaf.ExtKeyUsage}); err != nil {
			t.Errorf("at %s, %s does not verify: %v (NotBefore %s, NotAfter %s)", now.Format(time.RFC3339), e.Name, err,
				leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
		}
		if leaf.NotBefore.After(now) {
			t.Errorf("at %s, %s has NotBefore %s in the future", now.Format(time.RFC3339), e.Name, leaf.NotBefore.Format(time.RFC3339))
		}
	}
}

// TestRenewerClockJumps drives a running Renewer (real files, real minting,
// ticking every 10 ms) through wall-clock jumps and checks after each one
// what it minted, that every certificate verifies at the new time, and that
// it settles: no certificate minted on later ticks (no renewal storm), no
// crash, and a clear logged error where nothing valid can be minted.
func TestRenewerClockJumps(t *testing.T) {
	o := testOptions(t)
	clk := &jumpClock{now: base}
	o.Now = clk.Now
	p := mustEnsure(t, o)
	leaves := len(p.LeafNames())
	verifyAllAt(t, p, base)

	var mu sync.Mutex
	var batches [][]string
	issuedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(batches) }
	r := NewRenewer(o, 10*time.Millisecond, func(_ context.Context, names []string) {
		mu.Lock()
		batches = append(batches, names)
		mu.Unlock()
	})
	r.clockEvery = time.Hour // only the ticks here; TestRenewerClockWatch covers the watch
	logs := &logSink{}
	ctx := logs.context(context.Background())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})

	// settle waits for want batches of issued certificates after a jump,
	// then for 30 more ticks in which nothing else is minted.
	settle := func(t *testing.T, want int) {
		t.Helper()
		before := issuedCount()
		deadline := time.Now().Add(20 * time.Second)
		for issuedCount() < before+want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		got := batches[before:]
		mu.Unlock()
		if len(got) != want {
			t.Fatalf("minted %d batches after the jump, want %d: %v", len(got), want, got)
		}
		for _, b := range got {
			if len(b) != leaves {
				t.Errorf("renewed %v, want all %d leaves", b, leaves)
			}
		}
	}
	// wantErrors checks that every tick logs the same clear error and that
	// nothing on disk changed.
	wantErrors := func(t *testing.T, hash, want string) {
		t.Helper()
		logs.take()
		before := issuedCount()
		var lines []string
		for deadline := time.Now().Add(20 * time.Second); len(lines) < 5 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			lines = append(lines, logs.take()...)
		}
		// A tick that read the clock before the jump may log its lines just
		// after take() emptied the sink (seen under load: the previous
		// step's "CA expires soon" warnings, one per CA, so several); those
		// leading lines are not this step's, every line from the first of
		// this step's on must be.
		for len(lines) > 0 && !strings.Contains(lines[0], want) && strings.Contains(lines[0], "CA expires soon") {
			t.Logf("dropped a line from a tick before the jump: %q", lines[0])
			lines = lines[1:]
		}
		if len(lines) < 4 {
			t.Fatalf("%d log lines in 20 s of 10 ms ticks, want an error per tick: %q", len(lines), lines)
		}
		for _, l := range lines {
			if !strings.Contains(l, want) || !strings.Contains(l, "retrying") {
				t.Fatalf("logged %q, want an error saying %q", l, want)
			}
		}
		if n := issuedCount() - before; n != 0 {
			t.Errorf("minted %d batches while the clock makes minting impossible", n)
		}
		if h := clockTreeHash(t, p); h != hash {
			t.Error("certificate files changed while the clock makes minting impossible")
		}
		t.Logf("each tick logs: %s", lines[0])
	}

	day, year := 24*time.Hour, 365*24*time.Hour
	steps := []struct {
		name string
		now  time.Time
		// batches of leaves minted, or the error every tick logs instead.
		batches int
		err     string
	}{
		// The CAs were minted at base: a day earlier they are not valid yet.
		{name: "back a day before the CAs", now: base.Add(-day), err: "before the cluster CA's NotBefore"},
		{name: "board without RTC (1970)", now: time.Unix(0, 0), err: "before the cluster CA's NotBefore"},
		{name: "back to the present", now: base.Add(time.Minute), batches: 0},
		{name: "forward a year", now: base.Add(year + time.Hour), batches: 1},
		{name: "then back a day", now: base.Add(year + time.Hour - day), batches: 1},
		{name: "forward to a month before the CAs expire", now: base.Add(caValidity - 30*day), batches: 1},
		{name: "forward past the CAs' expiry", now: base.Add(caValidity + day), err: "cluster CA"},
		{name: "back into the CAs' last month", now: base.Add(caValidity - 20*day), batches: 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			hash := clockTreeHash(t, p)
			clk.Set(s.now)
			if s.err != "" {
				wantErrors(t, hash, s.err)
				return
			}
			settle(t, s.batches)
			verifyAllAt(t, p, s.now)
			if s.batches == 0 && clockTreeHash(t, p) != hash {
				t.Error("files changed although nothing was renewed")
			}
		})
	}
	t.Run("leaves capped at the CA's expiry", func(t *testing.T) {
		for _, e := range p.Entries() {
			if e.CA == nil {
				continue
			}
			if ca, leaf := loadCert(t, e.CA.Cert), loadCert(t, e.Pair.Cert); !leaf.NotAfter.Equal(ca.NotAfter) {
				t.Errorf("%s NotAfter %s, want the CA's %s", e.Name, leaf.NotAfter, ca.NotAfter)
			}
		}
	})
}

// TestRenewerClockWatch runs a Renewer whose ticks are an hour apart and
// jumps the wall clock forward a year, as NTP does on a board without a
// real-time clock: the leaves are renewed at once, once, and the jump is
// logged. Small drifts (the fake clock standing still) do not trigger a check.
func TestRenewerClockWatch(t *testing.T) {
	o := testOptions(t)
	clk := &jumpClock{now: base}
	o.Now = clk.Now
	p := mustEnsure(t, o)
	issued := make(chan []string, 4)
	r := NewRenewer(o, time.Hour, func(_ context.Context, names []string) { issued <- names })
	r.clockEvery = 10 * time.Millisecond
	logs := &logSink{}
	if err := r.Start(logs.context(context.Background())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})

	select {
	case names := <-issued:
		t.Fatalf("renewed %v before any jump", names)
	case <-time.After(200 * time.Millisecond):
	}
	now := base.Add(365*24*time.Hour + time.Hour)
	clk.Set(now)
	select {
	case names := <-issued:
		if len(names) != len(p.LeafNames()) {
			t.Errorf("renewed %v, want all %d leaves", names, len(p.LeafNames()))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("nothing renewed within 20 s of a year's jump; the ticker is an hour away")
	}
	verifyAllAt(t, p, now)
	select {
	case names := <-issued:
		t.Errorf("renewed again (%v) after the jump was handled", names)
	case <-time.After(200 * time.Millisecond):
	}
	jumps := 0
	for _, l := range logs.take() {
		if strings.Contains(l, "wall clock jumped") {
			jumps++
		}
	}
	if jumps != 1 {
		t.Errorf("logged %d clock jumps, want 1", jumps)
	}
}

// TestRenewerClockWatchSystemClock runs the watch on the system clock, as
// the server does (Options.Now unset): it samples without failing and no
// jump is seen.
func TestRenewerClockWatchSystemClock(t *testing.T) {
	o := testOptions(t)
	o.Now = nil
	mustEnsure(t, o)
	r := NewRenewer(o, time.Hour, nil)
	r.clockEvery = 5 * time.Millisecond
	logs := &logSink{}
	if err := r.Start(logs.context(context.Background())); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, l := range logs.take() {
		if strings.Contains(l, "wall clock jumped") {
			t.Errorf("a jump seen on the system clock: %s", l)
		}
	}
}

// TestEnsureClockErrors checks start-up (Ensure) and `certs rotate` (Rotate)
// at clocks at which no valid certificate can be minted: each returns a clear
// error and writes nothing. The server's own start with a clock before the
// CA is covered end to end by TestBadInput in test/e2e/badinput_test.go.
func TestEnsureClockErrors(t *testing.T) {
	o := testOptions(t)
	p := mustEnsure(t, o)
	hash := clockTreeHash(t, p)
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		now  time.Time
		want string
	}{
		{"before the CAs", base.Add(-time.Hour), "before the cluster CA's NotBefore"},
		{"just before the CAs, within the backdating", base.Add(-clockSkew - time.Second), "NotBefore"},
		{"1970", time.Unix(0, 0), "before the cluster CA's NotBefore"},
		{"after the CAs expired", base.Add(caValidity + time.Hour), "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			o.Now = clock(tc.now)
			if _, err := Ensure(ctx, o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Ensure at %s: %v, want an error saying %q", tc.now, err, tc.want)
			}
			if _, err := Rotate(ctx, p, RotateOptions{Now: clock(tc.now)}); err == nil {
				t.Errorf("Rotate at %s minted certificates", tc.now)
			} else {
				t.Logf("Rotate: %v", err)
			}
			if clockTreeHash(t, p) != hash {
				t.Fatal("files changed")
			}
		})
	}
}
