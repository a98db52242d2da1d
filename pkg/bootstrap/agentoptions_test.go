package bootstrap

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgeplane/edgeplane/pkg/apiendpoint"
	"github.com/edgeplane/edgeplane/pkg/nodetunnel"
)

// TestAgentLBServerPort: --lb-server-port defaults to the endpoint's port
// and refuses what is not a port, naming the flag.
func TestAgentLBServerPort(t *testing.T) {
	const token = "K10" + "0000000000000000000000000000000000000000000000000000000000000000" + "::abcdef.0123456789abcdef"
	for _, tc := range []struct {
		name    string
		port    *int
		want    int
		wantErr string
	}{
		{name: "default", want: apiendpoint.DefaultPort},
		{name: "another port", port: new(7444), want: 7444},
		{name: "zero", port: new(0), wantErr: "--lb-server-port 0: want a port, 1-65535"},
		{name: "too big", port: new(70000), wantErr: "--lb-server-port 70000: want a port, 1-65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewAgentOptions()
			o.DataDir, o.Server, o.Token = t.TempDir(), "https://10.0.0.1:6443", token
			if tc.port != nil {
				o.LBServerPort = *tc.port
			}
			c, err := o.Complete()
			if err != nil {
				t.Fatal(err)
			}
			err = errors.Join(c.Validate()...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("problems %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.LBServerPort != tc.want {
				t.Errorf("port %d, want %d", c.LBServerPort, tc.want)
			}
		})
	}
}

// TestAgentNodeTunnel: --node-tunnel defaults to auto and refuses what is
// not a mode, naming the flag.
func TestAgentNodeTunnel(t *testing.T) {
	const token = "K10" + "0000000000000000000000000000000000000000000000000000000000000000" + "::abcdef.0123456789abcdef"
	for _, tc := range []struct {
		name, value string // "": the default
		want        nodetunnel.Mode
		wantErr     string
	}{
		{name: "default", want: nodetunnel.ModeAuto},
		{name: "always", value: "always", want: nodetunnel.ModeAlways},
		{name: "off", value: "off", want: nodetunnel.ModeOff},
		{name: "not a mode", value: "on", wantErr: `--node-tunnel: node tunnel mode "on": want auto, always or off`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewAgentOptions()
			o.DataDir, o.Server, o.Token = t.TempDir(), "https://10.0.0.1:6443", token
			if tc.value != "" {
				o.NodeTunnel = tc.value
			}
			c, err := o.Complete()
			if err != nil {
				t.Fatal(err)
			}
			err = errors.Join(c.Validate()...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("problems %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.NodeTunnel != tc.want {
				t.Errorf("mode %q, want %q", c.NodeTunnel, tc.want)
			}
		})
	}
}
