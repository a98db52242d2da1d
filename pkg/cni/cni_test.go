package cni

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	data, err := Render(Config{PodCIDRs: []string{"10.42.3.0/24", "fd00:42:0:3::/64"}})
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type             string `json:"type"`
			Bridge           string `json:"bridge"`
			IsDefaultGateway bool   `json:"isDefaultGateway"`
			IPAM             struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
				Routes []any                 `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Name != NetworkName || len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("conflist = %s", data)
	}
	b := conf.Plugins[0]
	if b.Bridge != DefaultBridge || !b.IsDefaultGateway || b.IPAM.Type != "host-local" {
		t.Errorf("bridge plugin = %+v", b)
	}
	if len(b.IPAM.Ranges) != 2 || b.IPAM.Ranges[0][0]["subnet"] != "10.42.3.0/24" || b.IPAM.Ranges[1][0]["subnet"] != "fd00:42:0:3::/64" {
		t.Errorf("ranges = %v", b.IPAM.Ranges)
	}
	// The bridge adds the default route; one in ipam too fails ("file exists").
	if len(b.IPAM.Routes) != 0 {
		t.Errorf("ipam routes = %v, want none", b.IPAM.Routes)
	}
	for _, bad := range []Config{{}, {PodCIDRs: []string{"10.42.3.0"}}} {
		if _, err := Render(bad); err == nil {
			t.Errorf("Render(%+v) succeeded", bad)
		}
	}
}

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	c := Config{PodCIDRs: []string{"10.42.0.0/24"}}
	for i, want := range []bool{true, false} {
		changed, err := Write(dir, c)
		if err != nil || changed != want {
			t.Fatalf("write %d: changed %v, %v; want %v", i, changed, err, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != ConfFileName {
		t.Fatalf("dir holds %v (%v), want only %s", entries, err, ConfFileName)
	}
	c.PodCIDRs = []string{"10.42.1.0/24"}
	if changed, err := Write(dir, c); err != nil || !changed {
		t.Fatalf("rewrite: changed %v, %v", changed, err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, ConfFileName))
	if !strings.Contains(string(data), "10.42.1.0/24") {
		t.Errorf("file not rewritten: %s", data)
	}
}

func TestFindPluginDir(t *testing.T) {
	full, partial := t.TempDir(), t.TempDir()
	for _, p := range requiredPlugins {
		if err := os.WriteFile(filepath.Join(full, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(partial, "bridge"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if dir, err := FindPluginDir(partial, full); err != nil || dir != full {
		t.Errorf("FindPluginDir = %q, %v; want %q", dir, err, full)
	}
	_, err := FindPluginDir(partial)
	if !errors.Is(err, ErrNoPlugins) || !strings.Contains(err.Error(), "lacks host-local, portmap, loopback") || !strings.Contains(err.Error(), "apt-get install containernetworking-plugins") {
		t.Errorf("FindPluginDir(partial) = %v", err)
	}
}

// TestRenderMasquerade: alone, the bridge masquerades what leaves the
// node's pod CIDR; with flannel, flannel masquerades only what leaves the
// cluster CIDR, so the bridge must not, and the pods get flannel's MTU.
func TestRenderMasquerade(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conf       Config
		wantMasq   bool
		wantMTU    int
		wantMTUSet bool
	}{
		{name: "bridge alone", conf: Config{PodCIDRs: []string{"10.42.0.0/24"}}, wantMasq: true},
		{name: "with flannel vxlan", conf: Config{PodCIDRs: []string{"10.42.0.0/24"}, MTU: 1450, NoMasquerade: true}, wantMasq: false, wantMTU: 1450, wantMTUSet: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Render(tc.conf)
			if err != nil {
				t.Fatal(err)
			}
			var conf struct {
				Plugins []map[string]any `json:"plugins"`
			}
			if err := json.Unmarshal(data, &conf); err != nil {
				t.Fatal(err)
			}
			b := conf.Plugins[0]
			if b["ipMasq"] != tc.wantMasq {
				t.Errorf("ipMasq = %v, want %v", b["ipMasq"], tc.wantMasq)
			}
			mtu, ok := b["mtu"]
			if ok != tc.wantMTUSet || (ok && mtu != float64(tc.wantMTU)) {
				t.Errorf("mtu = %v (set %v), want %d (set %v)", mtu, ok, tc.wantMTU, tc.wantMTUSet)
			}
		})
	}
}

// TestRenderIPAMDataDir: the node's host-local state directory is in the
// configuration; without one the plugin takes its default.
func TestRenderIPAMDataDir(t *testing.T) {
	for _, dir := range []string{"/var/lib/edgeplane/agent/cni/networks", ""} {
		data, err := Render(Config{PodCIDRs: []string{"10.42.0.0/24"}, IPAMDataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []struct {
				IPAM map[string]any `json:"ipam"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(data, &conf); err != nil {
			t.Fatal(err)
		}
		got, set := conf.Plugins[0].IPAM["dataDir"]
		if set != (dir != "") || (set && got != dir) {
			t.Errorf("IPAMDataDir %q: ipam dataDir = %v (set %v)", dir, got, set)
		}
	}
}

// TestAdoptAllocations: the cases around the move itself; the move as a
// node makes it, with the real plugin, is in pkg/node.
func TestAdoptAllocations(t *testing.T) {
	cidrs := []string{"10.42.0.0/24", "fd00:42::/64"}
	t.Run("no previous state", func(t *testing.T) {
		moved, conflicts, err := AdoptAllocations(filepath.Join(t.TempDir(), "none"), t.TempDir(), NetworkName, cidrs)
		if err != nil || len(moved)+len(conflicts) != 0 {
			t.Errorf("= %v, %v, %v; want nothing", moved, conflicts, err)
		}
	})
	t.Run("moved, left, conflicting", func(t *testing.T) {
		legacy, dataDir := t.TempDir(), t.TempDir()
		from, to := filepath.Join(legacy, NetworkName), filepath.Join(dataDir, NetworkName)
		write := func(dir, name, content string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write(from, "10.42.0.5", "a\r\neth0")
		write(from, "fd00:42::5", "a\r\neth0")
		write(from, "10.42.1.5", "other node\r\neth0")
		write(from, "10.42.0.6", "b\r\neth0") // already handed out again in the new directory
		write(to, "10.42.0.6", "c\r\neth0")
		write(from, "10.42.0.7", "d\r\neth0") // moved before, its removal interrupted
		write(to, "10.42.0.7", "d\r\neth0")
		moved, conflicts, err := AdoptAllocations(legacy, dataDir, NetworkName, cidrs)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(moved, ",") != "10.42.0.5,fd00:42::5" || strings.Join(conflicts, ",") != "10.42.0.6" {
			t.Errorf("moved %v, conflicts %v; want 10.42.0.5,fd00:42::5 and 10.42.0.6", moved, conflicts)
		}
		for name, wantLeft := range map[string]bool{"10.42.0.5": false, "fd00:42::5": false, "10.42.0.7": false, "10.42.1.5": true, "10.42.0.6": true} {
			if _, err := os.Stat(filepath.Join(from, name)); (err == nil) != wantLeft {
				t.Errorf("%s in the previous directory: %v, want left %v", name, err, wantLeft)
			}
		}
		if data, _ := os.ReadFile(filepath.Join(to, "10.42.0.6")); string(data) != "c\r\neth0" {
			t.Errorf("the new directory's 10.42.0.6 = %q, want it kept", data)
		}
		if again, _, err := AdoptAllocations(legacy, dataDir, NetworkName, cidrs); err != nil || len(again) != 0 {
			t.Errorf("second run moved %v (%v), want nothing", again, err)
		}
	})
}
