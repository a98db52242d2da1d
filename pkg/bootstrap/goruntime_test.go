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
		{"512 MiB board: room for the code below the limit", false, false, 25, 512 * mib, 25, 448 * mib},
		{"256 MiB cgroup: room for the code below the limit", false, false, 25, 256 * mib, 25, 192 * mib},
		{"100 MiB: half of it", false, false, 25, 100 * mib, 25, 50 * mib},
		{"2 GiB host: half", false, false, 50, 2048 * mib, 50, 1024 * mib},
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

func TestBurstRSSCeiling(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name          string
		profile, host uint64
		want          uint64
	}{
		{"large host: the profile's", 320 * mib, 8192 * mib, 320 * mib},
		{"unknown memory: the profile's", 320 * mib, 0, 320 * mib},
		{"512 MiB board: the profile's (under the limit)", 320 * mib, 512 * mib, 320 * mib},
		{"256 MiB cgroup: the soft limit, not past the memory", 320 * mib, 256 * mib, 192 * mib},
		{"384 MiB board, default profile: the soft limit", 400 * mib, 384 * mib, 320 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := burstRSSCeiling(tc.profile, tc.host); got != tc.want {
				t.Fatalf("burstRSSCeiling(%d MiB, %d MiB) = %d MiB, want %d MiB", tc.profile/mib, tc.host/mib, got/mib, tc.want/mib)
			}
		})
	}
}
