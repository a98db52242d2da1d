package main

import (
	"context"
	"slices"
	"testing"
)

// TestPlan: -first's packages run in a go test of their own, the others of
// the patterns beside it at restNice, both with the same go test flags.
func TestPlan(t *testing.T) {
	// The test runs in hack/gotest: "../..." is hack's packages.
	const self, other = "github.com/edgeplane/edgeplane/hack/gotest", "github.com/edgeplane/edgeplane/hack/whydead"
	flags := []string{"-count=1", "-timeout", "60m"}
	with := func(pkgs ...string) []string { return append(slices.Clone(flags), pkgs...) }
	for _, tc := range []struct {
		name, first string
		want        []run
	}{
		{"without -first, one go test with the arguments as they are", "", []run{{args: with("../...")}}},
		{"-first's package first, the others niced beside it", ".", []run{{args: with(self)}, {args: with(other), nice: restNice}}},
		{"-first naming every package: one go test", "../...", []run{{args: with(self, other)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := plan(context.Background(), tc.first, with("../..."))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.want, func(a, b run) bool { return a.nice == b.nice && slices.Equal(a.args, b.args) }) {
				t.Errorf("plan = %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := plan(context.Background(), "./nosuchdir", with("../...")); err == nil {
		t.Error("-first naming no package: want an error")
	}
}
