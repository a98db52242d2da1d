package datastore

import (
	"strings"
	"testing"
)

// TestSQLiteSync: the DSN carries the chosen synchronous mode (FULL unless
// asked otherwise) and an unknown mode is refused naming the flag.
func TestSQLiteSync(t *testing.T) {
	cases := []struct {
		mode, wantPragma, wantErr string
	}{
		{mode: "", wantPragma: "synchronous(FULL)"},
		{mode: SyncFull, wantPragma: "synchronous(FULL)"},
		{mode: SyncNormal, wantPragma: "synchronous(NORMAL)"},
		{mode: "off", wantErr: `--sqlite-synchronous "off" is not one of`},
	}
	for _, tc := range cases {
		t.Run("mode "+tc.mode, func(t *testing.T) {
			o := Options{Type: TypeSQLite, DataDir: t.TempDir(), SQLiteSync: tc.mode}
			errs := o.Validate()
			if tc.wantErr != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
					t.Fatalf("problems %v; want one containing %q", errs, tc.wantErr)
				}
				return
			}
			if len(errs) != 0 {
				t.Fatal(errs)
			}
			ds, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			params := sqliteDSNParams(ds.(*kineStore).syncMode)
			if !strings.Contains(params, tc.wantPragma) || strings.Count(params, "synchronous(") != 1 {
				t.Fatalf("DSN parameters %q; want exactly one %s", params, tc.wantPragma)
			}
		})
	}
}
