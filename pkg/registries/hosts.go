package registries

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// hostsHeader is the first line of every hosts.toml WriteHosts writes: it
// removes the directories of hosts that are no longer configured only when
// their hosts.toml starts with it, never one a user made.
const hostsHeader = "# Written by edgeplane from registries.yaml; changes here are overwritten.\n"

// defaultDirName is containerd's directory for registries that have none
// of their own; a mirror for * goes there.
const defaultDirName = "_default"

// WriteHosts writes containerd's registry configuration directory (its
// config_path): <dir>/<registry host>/hosts.toml for every registry with a
// mirror or a TLS setting, files 0600 and directories 0700, and removes the
// directories it wrote earlier for registries no longer in the file.
//
// A hosts.toml names the registry itself as server (docker.io's is
// https://registry-1.docker.io) with the TLS settings of its configs entry,
// then each mirror endpoint in order as a [host."<url>"] with capabilities
// pull and resolve, the TLS settings of the endpoint host's configs entry,
// and override_path when the endpoint has a path (the path is then the
// whole API prefix, as in k3s). Credentials are not in hosts.toml:
// containerd reads no credentials there (see Auths). Rewrites are not
// written: upstream containerd's hosts.toml has none (containerd#5171 and
// #11625 proposed them and were closed; only k3s's own containerd build
// reads them), see Warnings. Containerd reads the
// directory at every pull, so a change needs no restart.
func (r *Registries) WriteHosts(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	want := map[string]string{}
	for host := range r.Mirrors {
		want[dirName(host)] = r.hostsTOML(host)
	}
	for host, c := range r.Configs {
		if _, ok := want[dirName(host)]; !ok && c.TLS != nil && host != "*" {
			want[dirName(host)] = r.hostsTOML(host)
		}
	}
	var errs []error
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	for _, e := range entries {
		if _, ok := want[e.Name()]; ok || !e.IsDir() {
			continue
		}
		if ours(filepath.Join(dir, e.Name(), "hosts.toml")) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("registries: remove %s: %w", e.Name(), err))
			}
		}
	}
	for _, name := range sortedKeys(want) {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			errs = append(errs, fmt.Errorf("registries: %w", err))
			continue
		}
		if err := os.Chmod(d, 0o700); err != nil {
			errs = append(errs, fmt.Errorf("registries: %w", err))
			continue
		}
		if err := writeFile(filepath.Join(d, "hosts.toml"), []byte(want[name])); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dirName is the directory containerd looks in for a registry host.
func dirName(host string) string {
	if host == "*" {
		return defaultDirName
	}
	return host
}

// ours reports whether path is a hosts.toml WriteHosts wrote.
func ours(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	return line == hostsHeader
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("registries: %w", err)
	}
	return nil
}

// hostsTOML is the hosts.toml of the registry host.
func (r *Registries) hostsTOML(host string) string {
	var b strings.Builder
	b.WriteString(hostsHeader)
	if r.File != "" {
		fmt.Fprintf(&b, "# Source: %s\n", r.File)
	}
	if host != "*" {
		tls := r.configFor(host).TLS
		server := "https://" + apiHost(host)
		// A loopback host:port is plain HTTP, as containerd takes it,
		// unless it has TLS settings.
		if u, err := normalizeEndpoint(host); err == nil && host != "docker.io" && tls == nil {
			server = u
		}
		fmt.Fprintf(&b, "server = %s\n", tomlQuote(server))
		writeTLS(&b, "", tls)
	}
	for _, ep := range r.Mirrors[host].Endpoints {
		u, _ := url.Parse(ep)
		fmt.Fprintf(&b, "\n[host.%s]\n", tomlQuote(ep))
		b.WriteString("  capabilities = [\"pull\", \"resolve\"]\n")
		if p := strings.TrimSuffix(u.Path, "/"); p != "" && p != "/v2" {
			b.WriteString("  override_path = true\n")
		}
		writeTLS(&b, "  ", r.configFor(u.Host).TLS)
	}
	if len(r.Mirrors[host].Endpoints) == 0 {
		b.WriteString(hostTableStub)
	}
	return b.String()
}

// hostTableStub ends a hosts.toml that has no mirror: containerd 1.6.20
// (containerd#10027, filed against 1.7) refuses a hosts.toml without a
// host table ("failed to decode hosts.toml: invalid `host` tree") and
// pulls as if there were none, so the server's TLS settings would be lost.
// TestPullWithRegistryCA's "containerd#10027" case fails once the
// containerd the tests run takes such a file.
const hostTableStub = "\n# An empty host table: see containerd#10027.\n[host]\n"

// configFor is the configs entry of host, or that of * when host has none.
func (r *Registries) configFor(host string) Config {
	if c, ok := r.Configs[host]; ok {
		return c
	}
	return r.Configs["*"]
}

func writeTLS(b *strings.Builder, indent string, t *TLSConfig) {
	if t == nil {
		return
	}
	if t.CAFile != "" {
		fmt.Fprintf(b, "%sca = %s\n", indent, tomlQuote(t.CAFile))
	}
	if t.CertFile != "" {
		fmt.Fprintf(b, "%sclient = [[%s, %s]]\n", indent, tomlQuote(t.CertFile), tomlQuote(t.KeyFile))
	}
	if t.InsecureSkipVerify {
		fmt.Fprintf(b, "%sskip_verify = true\n", indent)
	}
}

// tomlQuote is s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", c)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
