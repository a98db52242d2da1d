package chain

import "testing"

// TestCompactionStateQuiet walks the passes of an idle datastore after a
// burst of writes: a pass is skipped only once everything before the last
// record is compacted and nothing has been written since.
func TestCompactionStateQuiet(t *testing.T) {
	type pass struct {
		current                 int64 // the datastore's revision before the pass
		version, rev, compacted int64 // what etcd3.Compact returns, when the pass runs
		wantQuiet               bool
	}
	for _, tc := range []struct {
		name   string
		passes []pass
	}{
		{"writes, then idle", []pass{
			{current: 100, version: 1, rev: 101, compacted: 0},
			{current: 101, version: 2, rev: 102, compacted: 101},
			{current: 102, wantQuiet: true},
			{current: 102, wantQuiet: true},
			{current: 103, version: 3, rev: 104, compacted: 102},
			{current: 104, version: 4, rev: 105, compacted: 104},
			{current: 105, wantQuiet: true},
		}},
		{"another server records", []pass{
			{current: 50, version: 1, rev: 51, compacted: 0},
			// The compare failed: the other server's record, which
			// compacted to 49; the datastore is at 60.
			{current: 60, version: 3, rev: 60, compacted: 49},
			{current: 60, version: 4, rev: 61, compacted: 60},
			{current: 61, wantQuiet: true},
		}},
		{"busy", []pass{
			{current: 10, version: 1, rev: 11, compacted: 0},
			{current: 20, version: 2, rev: 21, compacted: 11},
			{current: 30, version: 3, rev: 31, compacted: 21},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s compactionState
			for i, p := range tc.passes {
				if got := s.quiet(p.current); got != p.wantQuiet {
					t.Fatalf("pass %d at revision %d: quiet %v, want %v (state %+v)", i, p.current, got, p.wantQuiet, s)
				}
				if !p.wantQuiet {
					s.passed(p.version, p.rev, p.compacted)
				}
			}
		})
	}
}
