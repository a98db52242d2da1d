package bootstrap

import (
	"errors"
	"net/http"
	"testing"
)

func TestComponentCheck(t *testing.T) {
	c := &componentCheck{name: "scheduler"}
	if err := c.Check(nil); err != nil {
		t.Fatalf("unattached check failed: %v", err)
	}
	broken := errors.New("informers not synced")
	c.attach(func(*http.Request) error { return broken })
	if err := c.Check(nil); !errors.Is(err, broken) {
		t.Fatalf("attached check = %v, want the component's error", err)
	}
	c.attach(func(*http.Request) error { return nil })
	if err := c.Check(nil); err != nil {
		t.Fatalf("healthy component: %v", err)
	}
}

func TestComponentChecksFollowDisable(t *testing.T) {
	for _, tc := range []struct {
		disabled map[string]bool
		want     []string
	}{
		{nil, []string{"controller-manager", "scheduler"}},
		{map[string]bool{"scheduler": true}, []string{"controller-manager"}},
		{map[string]bool{"scheduler": true, "controller-manager": true}, nil},
	} {
		o := CompletedOptions{&completedOptions{Disabled: tc.disabled}}
		var got []string
		for _, c := range readyzChecks(componentChecks(o)) {
			got = append(got, c.Name())
		}
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("disabled %v: checks %v, want %v", tc.disabled, got, tc.want)
		}
	}
}

// TestStartupGate: the start-up check fails until opened, then passes.
func TestStartupGate(t *testing.T) {
	g := newStartupGate()
	for _, step := range []struct {
		open bool
		want error
	}{
		{false, errStartupNotDone},
		{true, nil},
		{false, nil}, // stays open
	} {
		if step.open {
			g.open()
		}
		if got := g.Check(nil); got != step.want {
			t.Errorf("after open=%v: Check = %v, want %v", step.open, got, step.want)
		}
	}
}
