package bootstrap

import (
	"strings"
	"testing"
)

func TestDay2OptionsComplete(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(o *Day2Options)
		env     string
		wantErr string
	}{
		{name: "defaults"},
		{name: "snapshots off", mutate: func(o *Day2Options) { o.SnapshotSchedule = "" }},
		{name: "descriptor schedule", mutate: func(o *Day2Options) { o.SnapshotSchedule = "@every 6h" }},
		{name: "bad schedule", mutate: func(o *Day2Options) { o.SnapshotSchedule = "every day" }, wantErr: "--snapshot-schedule"},
		{name: "no retention", mutate: func(o *Day2Options) { o.SnapshotRetention = 0 }, wantErr: "--snapshot-retention 0"},
		{name: "policy without log", mutate: func(o *Day2Options) { o.AuditPolicyFile = "p.yaml" }, wantErr: "--audit-policy-file needs --audit-log-path"},
		{name: "negative size", mutate: func(o *Day2Options) { o.AuditLogPath = "a.log"; o.AuditLogMaxSize = -1 }, wantErr: "--audit-log-maxsize"},
		{name: "test leaf lifetime", env: "45s"},
		{name: "bad leaf lifetime", env: "1s", wantErr: "EDGEPLANE_TEST_LEAF_LIFETIME"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("EDGEPLANE_TEST_LEAF_LIFETIME", tc.env)
			o := newDay2Options()
			if tc.mutate != nil {
				tc.mutate(&o)
			}
			c, errs := o.complete()
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("errors: %v", errs)
				}
				if tc.env != "" && c.LeafValidity.String() != tc.env {
					t.Errorf("LeafValidity %v, want %s", c.LeafValidity, tc.env)
				}
				if o.AuditLogPath != "" && !strings.HasPrefix(c.AuditLogPath, "/") {
					t.Errorf("audit log path %q not absolute", c.AuditLogPath)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
				t.Fatalf("errors %v, want one containing %q", errs, tc.wantErr)
			}
		})
	}
}

func TestWriteAuditPolicy(t *testing.T) {
	dir := t.TempDir()
	p1, err := writeAuditPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := writeAuditPolicy(dir)
	if err != nil || p1 != p2 {
		t.Fatalf("second write: %q, %v", p2, err)
	}
}
