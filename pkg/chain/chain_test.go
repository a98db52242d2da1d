package chain

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/controlplane/reconcilers"
	"sigs.k8s.io/yaml"
)

func TestTimelineObserve(t *testing.T) {
	tl := newTimeline()
	start := tl.start
	body := func(lines ...string) string {
		out := ""
		for _, l := range lines {
			out += l + "\n"
		}
		return out + "readyz check failed\n"
	}
	tl.observe(body("[+]ping ok", "[-]poststarthook/rbac/bootstrap-roles failed: not finished"), start.Add(100*time.Millisecond))
	tl.observe(body("[+]ping ok", "[+]poststarthook/rbac/bootstrap-roles ok"), start.Add(2*time.Second))

	for _, tc := range []struct {
		check string
		want  time.Duration
	}{
		{"ping", 100 * time.Millisecond},
		{"poststarthook/rbac/bootstrap-roles", 2 * time.Second},
	} {
		if got := tl.okAt[tc.check]; got != tc.want {
			t.Errorf("%s turned ok after %s, want %s", tc.check, got, tc.want)
		}
	}
	slow := tl.slow()
	if len(slow) != 1 || slow[0].Name != "poststarthook/rbac/bootstrap-roles" {
		t.Fatalf("slow checks = %v, want only rbac/bootstrap-roles", slow)
	}
}

func TestFailing(t *testing.T) {
	got := failing("[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\n")
	if got != "[-]etcd failed: reason withheld" {
		t.Fatalf("failing() = %q", got)
	}
}

func TestSingleServerTuning(t *testing.T) {
	for _, tc := range []struct {
		name           string
		shared         bool
		noEndpoint     bool
		wantReconciler reconcilers.Type
		wantDisabled   bool
	}{
		{"one server owns its datastore", false, false, reconcilers.MasterCountReconcilerType, true},
		{"servers share a datastore", true, false, reconcilers.LeaseEndpointReconcilerType, false},
		{"one server for its own host only", false, true, reconcilers.NoneEndpointReconcilerType, true},
		{"servers share a datastore, this one for its own host only", true, true, reconcilers.NoneEndpointReconcilerType, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, count := endpointReconciler(tc.shared, tc.noEndpoint)
			if got != tc.wantReconciler || count != 1 {
				t.Errorf("endpointReconciler = %s, %d", got, count)
			}
			hooks := disabledHooks(&Config{SharedDatastore: tc.shared})
			if has := slices.Contains(hooks, "start-kube-apiserver-identity-lease-controller"); has != tc.wantDisabled {
				t.Errorf("identity lease hook disabled = %v, want %v", has, tc.wantDisabled)
			}
		})
	}
}

func TestWriteAuthenticationConfig(t *testing.T) {
	dir := t.TempDir()
	path, err := writeAuthenticationConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := writeAuthenticationConfig(dir)
	if err != nil || again != path {
		t.Fatalf("second write: %q, %v", again, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Anonymous struct {
			Enabled    bool `json:"enabled"`
			Conditions []struct {
				Path string `json:"path"`
			} `json:"conditions"`
		} `json:"anonymous"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range doc.Anonymous.Conditions {
		paths = append(paths, c.Path)
	}
	want := []string{"/healthz", "/livez", "/readyz", "/api/v1/namespaces/kube-public/configmaps/cluster-info"}
	if !doc.Anonymous.Enabled || !slices.Equal(paths, want) {
		t.Errorf("anonymous = %v %q, want exactly the paths %q", doc.Anonymous.Enabled, paths, want)
	}
}

// TestValidateNeedsKubeletCA: a chain without a CA for kubelets is refused,
// since upstream's kubelet client would then skip verifying kubelets.
func TestValidateNeedsKubeletCA(t *testing.T) {
	files := Files{ServingCert: "s.crt", ServingKey: "s.key", ClientCA: "c.crt", FrontProxyCA: "f.crt",
		ServiceAccountKey: "sa.key", ServiceAccountPub: "sa.pub", KubeletCA: "k.crt"}
	for _, tt := range []struct {
		name    string
		kubelet string
		wantErr bool
	}{
		{"with a kubelet CA", "k.crt", false},
		{"without", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := files
			f.KubeletCA = tt.kubelet
			err := (&Config{Files: f}).validate()
			if got := err != nil && strings.Contains(err.Error(), "chain: no kubelet CA file"); got != tt.wantErr {
				t.Errorf("validate() = %v; want a kubelet CA error: %v", err, tt.wantErr)
			}
		})
	}
}
