package snapshot

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseSchedule feeds --snapshot-schedule values to ParseSchedule. An
// accepted schedule must fire: its next slot after any reference time lies
// after that time (a zero Next would make the scheduler loop snapshot
// without pause), and it must keep advancing. Errors name the flag.
func FuzzParseSchedule(f *testing.F) {
	for _, seed := range []string{
		DefaultSchedule, "@every 6h", "@daily", "@hourly", "@every 1s", "@every 0s", "@every -1h",
		"*/5 * * * *", "0 0 29 2 *", "0 0 30 2 *", "0 0 31 4 *", "59 23 31 12 *", "0 0 * * 7",
		"CRON_TZ=Europe/Berlin 0 3 * * *", "TZ=UTC @daily", "CRON_TZ=", "TZ=", "* * * * * *",
		"", " ", "@", "@every", "@every x", "1-60 * * * *", "0 0 1-31/0 * *", "a b c d e", "0 0 ? * MON-FRI",
	} {
		f.Add(seed)
	}
	refs := []time.Time{
		time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		time.Date(2027, 12, 31, 23, 59, 59, 0, time.UTC),
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := ParseSchedule(spec)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--snapshot-schedule ") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		for _, ref := range refs {
			next := s.Next(ref)
			if !next.After(ref) {
				t.Fatalf("accepted %q never fires after %s (Next = %s)", spec, ref, next)
			}
			if after := s.Next(next); !after.After(next) {
				t.Fatalf("accepted %q fires at %s and then not again (Next = %s)", spec, next, after)
			}
		}
	})
}
