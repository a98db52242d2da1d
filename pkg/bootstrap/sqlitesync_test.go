package bootstrap

import (
	"testing"
	"time"
)

// TestSQLiteSynchronousFlag: full is the default, normal is the explicit
// opt-out, anything else (or normal on a datastore that is not SQLite) is
// refused naming the flag.
func TestSQLiteSynchronousFlag(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    string // the completed mode when accepted
		wantErr string // a part of the one expected problem
	}{
		{name: "default is full", want: "full"},
		{name: "normal on sqlite", args: []string{"--sqlite-synchronous=normal"}, want: "normal"},
		{name: "case and spaces", args: []string{"--sqlite-synchronous= NORMAL "}, want: "normal"},
		{name: "full on etcd", args: []string{"--datastore=etcd", "--sqlite-synchronous=full"}, want: "full"},
		{name: "normal on a sqlite endpoint", args: []string{"--datastore-endpoint=sqlite:///var/lib/x.db", "--sqlite-synchronous=normal"}, want: "normal"},
		{name: "unknown mode", args: []string{"--sqlite-synchronous=off"}, wantErr: `--sqlite-synchronous "off" is not one of: full`},
		{name: "normal on etcd", args: []string{"--datastore=etcd", "--sqlite-synchronous=normal"}, wantErr: "applies to SQLite only, and the datastore is etcd"},
		{name: "normal on postgres", args: []string{"--datastore-endpoint=postgres://u:p@h/db", "--sqlite-synchronous=normal"}, wantErr: "the datastore is postgres"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := validateArgs(t, tc.args)
			if tc.wantErr != "" {
				wantOneProblem(t, errs, tc.wantErr)
				return
			}
			if len(errs) != 0 {
				t.Fatalf("problems: %v", errs)
			}
			if c.SQLiteSynchronous != tc.want {
				t.Fatalf("mode %q, want %q", c.SQLiteSynchronous, tc.want)
			}
		})
	}
}

// TestSQLiteCommitWindowFlag: 0 is the default, a window up to a second is
// taken, a negative or longer one is refused naming the flag.
func TestSQLiteCommitWindowFlag(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		want    time.Duration
		wantErr string
	}{
		{name: "default", want: 0},
		{name: "50ms", args: []string{"--sqlite-commit-window=50ms"}, want: 50 * time.Millisecond},
		{name: "negative", args: []string{"--sqlite-commit-window=-1ms"}, wantErr: "--sqlite-commit-window -1ms is not between 0 and 1s"},
		{name: "too long", args: []string{"--sqlite-commit-window=2s"}, wantErr: "--sqlite-commit-window 2s is not between 0 and 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, errs := validateArgs(t, tc.args)
			if tc.wantErr != "" {
				wantOneProblem(t, errs, tc.wantErr)
				return
			}
			if len(errs) != 0 || c.SQLiteCommitWindow != tc.want {
				t.Fatalf("window %s (problems %v), want %s", c.SQLiteCommitWindow, errs, tc.want)
			}
		})
	}
}
