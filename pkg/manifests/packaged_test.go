package manifests

import (
	"net"
	"strings"
	"testing"
)

func TestDNSServiceIP(t *testing.T) {
	tests := []struct {
		cidr    string
		want    string
		wantErr string
	}{
		{cidr: "10.43.0.0/16", want: "10.43.0.10"},
		{cidr: "10.96.0.0/12", want: "10.96.0.10"},
		{cidr: "192.168.7.16/28", want: "192.168.7.26"},
		{cidr: "fd00:43::/112", want: "fd00:43::a"},
		{cidr: "10.0.0.0/29", wantErr: "too small"},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			_, cidr, err := net.ParseCIDR(tt.cidr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DNSServiceIP(cidr)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("DNSServiceIP(%s) = %s, want %s", tt.cidr, got, tt.want)
			}
			if !cidr.Contains(got) {
				t.Errorf("%s is outside %s", got, cidr)
			}
		})
	}
}

func TestPackaged(t *testing.T) {
	good := Values{ClusterDNS: net.ParseIP("10.43.0.10"), ClusterDomain: "edge.example", CoreDNSImage: "example.org/coredns:v9"}
	tests := []struct {
		name    string
		values  Values
		want    []string // substrings of coredns.yaml
		wantErr string
	}{
		{name: "values land in the manifest", values: good, want: []string{
			"clusterIP: 10.43.0.10", "kubernetes edge.example in-addr.arpa ip6.arpa", "image: example.org/coredns:v9", "imagePullPolicy: IfNotPresent",
			"forward . /etc/resolv.conf", "path: /ready",
		}},
		{name: "no image", values: Values{ClusterDNS: good.ClusterDNS, ClusterDomain: "cluster.local"}, wantErr: "--coredns-image"},
		{name: "no address", values: Values{ClusterDomain: "cluster.local", CoreDNSImage: "x"}, wantErr: "cluster DNS address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Packaged(tt.values)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			yaml := string(got[CoreDNS])
			for _, w := range tt.want {
				if !strings.Contains(yaml, w) {
					t.Errorf("coredns.yaml lacks %q", w)
				}
			}
			objs, err := decode("coredns.yaml", got[CoreDNS])
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if want := "ServiceAccount ClusterRole ClusterRoleBinding ConfigMap Deployment Service"; strings.Join(kinds, " ") != want {
				t.Errorf("kinds = %v, want %s", kinds, want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    int
		wantErr string
	}{
		{name: "multi-document with empty ones", data: "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n", want: 2},
		{name: "json", data: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`, want: 1},
		{name: "empty file", data: "", want: 0},
		{name: "no kind", data: "apiVersion: v1\nmetadata: {name: a}\n", wantErr: "document 1 has no apiVersion or kind"},
		{name: "no name", data: "apiVersion: v1\nkind: ConfigMap\n---\n", wantErr: "document 1 (ConfigMap) has no metadata.name"},
		{name: "a List", data: "apiVersion: v1\nkind: List\nmetadata: {name: l}\nitems: []\n", wantErr: "separate documents"},
		{name: "bad yaml", data: "apiVersion: v1\nkind: [\n", wantErr: "f.yaml: document 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := decode("f.yaml", []byte(tt.data))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != tt.want {
				t.Errorf("got %d objects, want %d", len(objs), tt.want)
			}
		})
	}
}

func TestRender(t *testing.T) {
	fields := map[string]string{"A": "one", "Image": "example.org/x:v1"}
	tests := []struct {
		name, in, want, wantErr string
	}{
		{name: "spaced and tight", in: "a: {{ .A }}\nb: {{.Image}}\n", want: "a: one\nb: example.org/x:v1\n"},
		{name: "twice", in: "{{ .A }}-{{ .A }}", want: "one-one"},
		{name: "nothing to fill", in: "plain: yaml\n", want: "plain: yaml\n"},
		{name: "unknown name", in: "x: {{ .B }}\ny: {{ .C }}", wantErr: "no value for B, C"},
		{name: "other template forms", in: "ok: 1\nx: {{ if .A }}y{{ end }}", wantErr: "line 2: only {{ .Name }}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := render([]byte(tt.in), fields)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("render = %q, want %q", got, tt.want)
			}
		})
	}
}
