package nodeconfig

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletdefaults "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
)

func TestPublishFetch(t *testing.T) {
	tests := []struct {
		name  string
		lease time.Duration
		want  string // the ConfigMap's node-lease-duration
	}{
		{name: "upstream's heartbeat is not published", lease: 0},
		{name: "a longer lease", lease: LeaseDuration(30 * time.Second), want: "120"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			in := Config{ClientCA: []byte("ca"), ClusterDomain: "cluster.local", ClusterDNS: []net.IP{net.ParseIP("10.43.0.10")}, NodeLeaseDuration: tt.lease}
			if err := Publish(ctx, client, in); err != nil {
				t.Fatal(err)
			}
			cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := cm.Data[keyLease]; got != tt.want {
				t.Errorf("%s = %q, want %q", keyLease, got, tt.want)
			}
			out, err := Fetch(ctx, client)
			if err != nil {
				t.Fatal(err)
			}
			if out.NodeLeaseDuration != tt.lease || out.ClusterDomain != in.ClusterDomain || !out.ClusterDNS[0].Equal(in.ClusterDNS[0]) {
				t.Errorf("Fetch = %+v, want %+v", out, in)
			}
		})
	}
}

// TestAllowPrivileged: the setting goes through the ConfigMap both ways; a
// ConfigMap without it (a server older than --allow-privileged, whose API
// server refused privileged containers) reads as false; a bad value is an
// error naming the key.
func TestAllowPrivileged(t *testing.T) {
	tests := []struct {
		name    string
		publish *bool  // nil: publish nothing, edit the ConfigMap instead
		edit    string // the key's value; "-": remove the key
		want    bool
		wantErr string
	}{
		{name: "allowed", publish: ptr(true), want: true},
		{name: "refused", publish: ptr(false), want: false},
		{name: "an older server published none", edit: "-", want: false},
		{name: "not a boolean", edit: "yes please", wantErr: `key allow-privileged: "yes please" is not true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			in := Config{ClientCA: []byte("ca")}
			if tt.publish != nil {
				in.AllowPrivileged = *tt.publish
			}
			if err := Publish(ctx, client, in); err != nil {
				t.Fatal(err)
			}
			if tt.publish == nil {
				cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if tt.edit == "-" {
					delete(cm.Data, keyPrivileged)
				} else {
					cm.Data[keyPrivileged] = tt.edit
				}
				if _, err := client.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			out, err := Fetch(ctx, client)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Fetch: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.AllowPrivileged != tt.want {
				t.Errorf("AllowPrivileged = %v, want %v", out.AllowPrivileged, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestFetchBadLease(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	if err := Publish(ctx, client, Config{ClientCA: []byte("ca")}); err != nil {
		t.Fatal(err)
	}
	cm, _ := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
	cm.Data[keyLease] = "40s"
	if _, err := client.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(ctx, client); err == nil || !strings.Contains(err.Error(), "not a number of seconds") {
		t.Fatalf("Fetch: %v, want a bad lease duration error", err)
	}
}

func TestValidateHeartbeat(t *testing.T) {
	for _, tt := range []struct {
		heartbeat time.Duration
		ok        bool
	}{
		{DefaultHeartbeat, true}, {MinHeartbeat, true}, {MaxHeartbeat, true}, {30 * time.Second, true},
		{time.Second, false}, {2500 * time.Millisecond, false}, {3 * time.Minute, false}, {0, false},
	} {
		if err := ValidateHeartbeat(tt.heartbeat); (err == nil) != tt.ok {
			t.Errorf("ValidateHeartbeat(%s) = %v, want ok %v", tt.heartbeat, err, tt.ok)
		}
	}
}

// TestDefaultHeartbeatIsUpstreams: at the default heartbeat the kubelets keep
// upstream's Lease (the kubelet's default nodeLeaseDurationSeconds) and the
// node lifecycle controller upstream's 50 s grace period, so a changed
// upstream default shows here.
func TestDefaultHeartbeatIsUpstreams(t *testing.T) {
	var kc kubeletv1beta1.KubeletConfiguration
	kubeletdefaults.SetDefaults_KubeletConfiguration(&kc)
	if got := time.Duration(kc.NodeLeaseDurationSeconds) * time.Second; got != LeaseDuration(DefaultHeartbeat) {
		t.Errorf("the kubelet's default Lease is %s, LeaseDuration(DefaultHeartbeat) %s", got, LeaseDuration(DefaultHeartbeat))
	}
	if got := MonitorGracePeriod(DefaultHeartbeat); got != 50*time.Second {
		t.Errorf("MonitorGracePeriod(DefaultHeartbeat) = %s, upstream's --node-monitor-grace-period is 50s", got)
	}
}

// TestKubeletServingCA: the kubelet-serving CA a server publishes reaches
// nodes under its own key, and a server from before it publishes none.
func TestKubeletServingCA(t *testing.T) {
	for _, tt := range []struct {
		name string
		ca   string
	}{
		{"published", "-----BEGIN CERTIFICATE-----\nkubelet-serving\n-----END CERTIFICATE-----\n"},
		{"a server from before it", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			if err := Publish(ctx, client, Config{ClientCA: []byte("client"), KubeletServingCA: []byte(tt.ca)}); err != nil {
				t.Fatal(err)
			}
			cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := cm.Data["kubelet-serving-ca.crt"]; got != tt.ca || ok != (tt.ca != "") {
				t.Errorf("kubelet-serving-ca.crt = %q (present %v), want %q", got, ok, tt.ca)
			}
			out, err := Fetch(ctx, client)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.KubeletServingCA) != tt.ca || string(out.ClientCA) != "client" {
				t.Errorf("Fetch: kubelet-serving CA %q, client CA %q; want %q, %q", out.KubeletServingCA, out.ClientCA, tt.ca, "client")
			}
		})
	}
}

// TestLocalStoragePath: the server's storage path reaches nodes; a server
// that runs no local storage (disabled, or older than it) publishes none,
// so nodes run no local storage part; a path that is not absolute is an
// error naming the key.
func TestLocalStoragePath(t *testing.T) {
	for _, tt := range []struct {
		name    string
		publish string
		edit    string // the key's value after publishing; "-": remove the key; "": keep
		want    string
		wantErr string
	}{
		{name: "published", publish: "/var/lib/edgeplane/storage", want: "/var/lib/edgeplane/storage"},
		{name: "disabled", publish: "", want: ""},
		{name: "a server from before it", publish: "/x", edit: "-", want: ""},
		{name: "relative", publish: "/x", edit: "storage", wantErr: `local-storage-path: "storage" is not a clean absolute path`},
		{name: "not clean", publish: "/x", edit: "/a/../b", wantErr: `local-storage-path: "/a/../b" is not a clean absolute path`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			if err := Publish(ctx, client, Config{ClientCA: []byte("client"), LocalStoragePath: tt.publish}); err != nil {
				t.Fatal(err)
			}
			if tt.edit != "" {
				cm, err := client.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if tt.edit == "-" {
					delete(cm.Data, keyLocalStorage)
				} else {
					cm.Data[keyLocalStorage] = tt.edit
				}
				if _, err := client.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			out, err := Fetch(ctx, client)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Fetch error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out.LocalStoragePath != tt.want {
				t.Errorf("LocalStoragePath = %q, want %q", out.LocalStoragePath, tt.want)
			}
		})
	}
}
