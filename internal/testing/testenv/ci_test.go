package testenv

import "testing"

// TestIsCI: what CI systems set counts as CI, the false values a person
// sets do not.
func TestIsCI(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"true", true},       // GitHub Actions, GitLab, Travis, CircleCI, Buildkite, .ci/run
		{"True", true},       // AppVeyor
		{"TRUE", true},       //
		{"1", true},          //
		{"woodpecker", true}, // Woodpecker
		{"yes", true},
		{"", false},
		{"0", false},
		{"false", false},
		{"False", false},
		{"no", false},
		{"off", false},
		{" false ", false},
	}
	for _, tc := range tests {
		if got := IsCI(tc.value); got != tc.want {
			t.Errorf("IsCI(%q) = %v, want %v", tc.value, got, tc.want)
		}
	}
}
