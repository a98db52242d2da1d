package node

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/cni"
	"github.com/edgeplane/edgeplane/pkg/flannel"
)

// hostLocal runs the host's CNI host-local plugin, as the runtime runs it
// for the bridge of the node's configuration.
type hostLocal struct {
	t       *testing.T
	plugins string
	conf    []byte // the bridge plugin's configuration, with name and cniVersion
}

// nodeHostLocal renders node's CNI configuration (the product's:
// networkComponents' PodNetwork, for dir as the node's directory and
// cidr as its pod CIDR) and checks that host-local keeps its state
// under dir.
func nodeHostLocal(t *testing.T, plugins, dir, cidr string) (*hostLocal, *PodNetwork) {
	t.Helper()
	comps, err := networkComponents(context.Background(), Settings{Name: filepath.Base(dir), CNIConfDir: filepath.Join(dir, "net.d")}, PathsIn(dir), Network{FlannelBackend: flannel.BackendNone}, "10.42.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	podnet, ok := comps[0].(*PodNetwork)
	if !ok || len(comps) != 1 {
		t.Fatalf("network components = %v, want the pod network alone", comps)
	}
	data, err := cni.Render(podnet.config([]string{cidr}))
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	bridge := list.Plugins[0]
	ipam, _ := bridge["ipam"].(map[string]any)
	dataDir, _ := ipam["dataDir"].(string)
	if dataDir == "" || !strings.HasPrefix(dataDir, dir+string(filepath.Separator)) {
		// Checked before the plugin runs: host-local's default is the
		// host's /var/lib/cni/networks, which this test must not touch.
		t.Fatalf("node in %s: host-local dataDir = %q (empty: the plugin's default %s, one for every node on the host), want a directory of the node's own under %s", dir, dataDir, cni.LegacyIPAMDataDir, dir)
	}
	bridge["name"], bridge["cniVersion"] = list.Name, list.CNIVersion
	conf, err := json.Marshal(bridge)
	if err != nil {
		t.Fatal(err)
	}
	return &hostLocal{t: t, plugins: plugins, conf: conf}, podnet
}

func (h *hostLocal) run(command, container string) string {
	h.t.Helper()
	cmd := exec.Command(filepath.Join(h.plugins, "host-local"))
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + container, "CNI_NETNS=/proc/self/ns/net",
		"CNI_IFNAME=eth0", "CNI_PATH=" + h.plugins}
	cmd.Stdin = bytes.NewReader(h.conf)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		h.t.Fatalf("host-local %s %s: %v: %s %s", command, container, err, out, stderr.Bytes())
	}
	if command != "ADD" {
		return ""
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 {
		h.t.Fatalf("host-local ADD %s: %s (%v)", container, out, err)
	}
	return res.IPs[0].Address
}

func cniPlugins(t *testing.T) string {
	dir, err := cni.FindPluginDir()
	if err != nil {
		t.Skipf("needs the CNI reference plugins: %v", err)
	}
	return dir
}

// TestPodNetworkIPAMPerNode: two nodes on one host (the e2e and
// conformance clusters; also two edgeplane installs side by side) each keep
// host-local's state under their own directory, so each allocates its
// addresses round-robin. With one shared state directory (host-local's
// default, which the configuration left before) each node found the other's
// last address outside its range and started again from its first free
// address: a released address went to the next pod at once.
func TestPodNetworkIPAMPerNode(t *testing.T) {
	plugins := cniPlugins(t)
	host := t.TempDir()
	a, _ := nodeHostLocal(t, plugins, filepath.Join(host, "a", DirName), "10.42.0.0/24")
	b, _ := nodeHostLocal(t, plugins, filepath.Join(host, "b", DirName), "10.42.1.0/24")
	first := a.run("ADD", "pod-1")
	b.run("ADD", "pod-2")
	a.run("DEL", "pod-1")
	b.run("ADD", "pod-3")
	if next := a.run("ADD", "pod-4"); next == first {
		t.Errorf("node a handed %s, released a moment ago, to the next pod: its allocation is not round-robin", first)
	}
}

// TestPodNetworkAdoptsLegacyReservations: a node upgraded from a version
// that left host-local's state in the host's default directory moves its
// reservations into its own directory before the configuration names it,
// so the running pods' addresses are not handed out again; another node's
// reservations in the shared directory stay.
func TestPodNetworkAdoptsLegacyReservations(t *testing.T) {
	plugins := cniPlugins(t)
	host := t.TempDir()
	legacy := filepath.Join(host, "var-lib-cni-networks")
	old := filepath.Join(legacy, cni.NetworkName)
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	// The previous configuration's state: a running pod of this node, one
	// of another node on the host, and host-local's own files.
	files := map[string]string{
		"10.42.0.2":          "running-pod\r\neth0",
		"10.42.1.2":          "other-node-pod\r\neth0",
		"last_reserved_ip.0": "10.42.1.2",
		"lock":               "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(old, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(host, "a", DirName)
	h, podnet := nodeHostLocal(t, plugins, dir, "10.42.0.0/24")
	podnet.legacyIPAM = legacy
	podnet.adopt(context.Background(), []string{"10.42.0.0/24"})

	if got := h.run("ADD", "new-pod"); strings.HasPrefix(got, "10.42.0.2/") {
		t.Fatalf("the new pod got %s, the address of a pod running since before the upgrade", got)
	}
	moved, err := os.ReadFile(filepath.Join(podnet.IPAMDataDir, cni.NetworkName, "10.42.0.2"))
	if err != nil || string(moved) != files["10.42.0.2"] {
		t.Errorf("reservation in the node's directory: %q, %v; want %q", moved, err, files["10.42.0.2"])
	}
	if _, err := os.Stat(filepath.Join(old, "10.42.0.2")); !os.IsNotExist(err) {
		t.Errorf("the moved reservation is still in %s (%v): it would never be released there", old, err)
	}
	for _, name := range []string{"10.42.1.2", "last_reserved_ip.0"} {
		if _, err := os.Stat(filepath.Join(old, name)); err != nil {
			t.Errorf("%s of the shared directory: %v, want it left", name, err)
		}
	}
	// The pod that ran before the upgrade is deleted: the runtime runs DEL
	// with the present configuration, which releases the moved reservation.
	h.run("DEL", "running-pod")
	if _, err := os.Stat(filepath.Join(podnet.IPAMDataDir, cni.NetworkName, "10.42.0.2")); !os.IsNotExist(err) {
		t.Errorf("10.42.0.2 still reserved after its pod's DEL (%v)", err)
	}
}
