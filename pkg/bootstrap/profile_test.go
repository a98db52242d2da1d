package bootstrap

import (
	"strings"
	"testing"
)

func TestResolveProfile(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		value   string
		memory  uint64
		want    string
		wantErr string
	}{
		{value: "auto", memory: 906 << 20, want: ProfileSmall},        // a 1 GB Raspberry Pi 3
		{value: "auto", memory: 1536 << 20, want: ProfileSmall},       // the threshold itself
		{value: "auto", memory: 1848 << 20, want: ProfileDefault},     // a 2 GB board
		{value: "", memory: 8 * gib, want: ProfileDefault},            // unset means auto
		{value: "auto", memory: 0, want: ProfileDefault},              // memory unknown
		{value: " Small ", memory: 8 * gib, want: ProfileSmall},       // explicit wins over memory
		{value: "default", memory: 512 << 20, want: ProfileDefault},   // explicit wins over memory
		{value: "tiny", memory: 8 * gib, wantErr: `--profile "tiny"`}, // lists the choices
	} {
		t.Run(tc.value, func(t *testing.T) {
			got, err := ResolveProfile(tc.value, tc.memory)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "auto, default, small") {
					t.Fatalf("ResolveProfile(%q) error = %v, want one naming %s and the choices", tc.value, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveProfile(%q, %d MiB) = %q, %v; want %q", tc.value, tc.memory>>20, got, err, tc.want)
			}
		})
	}
}

func TestProfileSettings(t *testing.T) {
	def, small := profileSettings(ProfileDefault), profileSettings(ProfileSmall)
	if def.GCPercent != defaultGCPercent || def.Chain.DisableOpenAPIV2 || def.ControllerWorkers != 0 || def.LeanControllers {
		t.Errorf("default profile changes upstream behaviour beyond GOGC: %+v", def)
	}
	if small.GCPercent >= def.GCPercent || !small.Chain.DisableOpenAPIV2 || small.ControllerWorkers == 0 || !small.LeanControllers {
		t.Errorf("small profile does not trim: %+v", small)
	}
	if def.BurstHeap == 0 || small.BurstHeap == 0 || small.BurstHeap >= def.BurstHeap {
		t.Errorf("burst heap: default %d, small %d; want both set, small's lower", def.BurstHeap, small.BurstHeap)
	}
	// The ceilings stay under the RSS budgets of test/e2e's load_test.go (600 and 400 MiB).
	if def.BurstRSSCeiling == 0 || def.BurstRSSCeiling >= 600<<20 || small.BurstRSSCeiling == 0 || small.BurstRSSCeiling >= 400<<20 {
		t.Errorf("burst RSS ceilings: default %d, small %d", def.BurstRSSCeiling, small.BurstRSSCeiling)
	}
	if small.Chain.MaxRequestsInFlight <= 0 || small.Chain.MaxMutatingRequestsInFlight <= 0 || small.Chain.EventTTL <= 0 {
		t.Errorf("small profile limits unset: %+v", small.Chain)
	}
}

func TestCompleteRejectsUnknownProfile(t *testing.T) {
	o := NewOptions()
	o.DataDir = t.TempDir()
	o.AdvertiseAddress = "192.0.2.10"
	o.Profile = "huge"
	o.Datastore = "nosuch"
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	errs := c.Validate()
	var joined []string
	for _, e := range errs {
		joined = append(joined, e.Error())
	}
	all := strings.Join(joined, "\n")
	if !strings.Contains(all, `--profile "huge"`) || !strings.Contains(all, `--datastore "nosuch"`) {
		t.Fatalf("Validate() should report the bad profile and the bad datastore together, got:\n%s", all)
	}
}
