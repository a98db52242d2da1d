package app

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseDays feeds `edgeplane certs check --warn-within` values to
// parseDays. An accepted value is never negative, "<n>d" means exactly n
// days (no overflow), and errors quote the value.
func FuzzParseDays(f *testing.F) {
	for _, s := range []string{"30d", "0d", "12h", "1h30m", "-1d", "-1h", "d", "1.5d", "+3d", "106751d", "106752d",
		"9223372036854775807d", "2562047h", "2562048h", "", " 30d", "30D", "1e3d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDays(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("error does not quote %q: %v", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("parseDays(%q) = %v, negative", s, d)
		}
		if days, ok := strings.CutSuffix(s, "d"); ok {
			n, err := strconv.ParseInt(days, 10, 64)
			if err != nil || time.Duration(n) != d/(24*time.Hour) || d%(24*time.Hour) != 0 {
				t.Fatalf("parseDays(%q) = %v, not %s days", s, d, days)
			}
		}
	})
}
