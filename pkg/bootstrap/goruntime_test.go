package bootstrap

import "testing"

func TestGoRuntimeSettings(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name              string
		gogcSet, limitSet bool
		profileGC         int
		host              uint64
		wantGC            int
		wantLimit         int64
	}{
		{"8 GiB host", false, false, 50, 8192 * mib, 50, 4096 * mib},
		{"1 GiB board keeps the 512 MiB floor", false, false, 25, 1024 * mib, 25, 512 * mib},
		{"512 MiB board: the limit never exceeds the memory", false, false, 25, 512 * mib, 25, 512 * mib},
		{"user's GOGC and GOMEMLIMIT win", true, true, 25, 1024 * mib, 0, 0},
		{"unknown memory sets no limit", false, false, 50, 0, 50, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gc, limit := goRuntimeSettings(tc.gogcSet, tc.limitSet, tc.profileGC, tc.host)
			if gc != tc.wantGC || limit != tc.wantLimit {
				t.Fatalf("goRuntimeSettings = %d, %d MiB; want %d, %d MiB", gc, limit/mib, tc.wantGC, tc.wantLimit/mib)
			}
		})
	}
}
