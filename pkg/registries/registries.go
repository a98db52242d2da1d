// Package registries reads registries.yaml, the file of registry mirrors
// and credentials of a node's managed containerd, in k3s's format:
//
//	mirrors:
//	  docker.io:
//	    endpoint: ["https://mirror.example.com:5000"]
//	    rewrite:
//	      "^library/(.*)": "mirror/$1"
//	configs:
//	  mirror.example.com:5000:
//	    auth: {username: edge, password: secret}
//	    tls: {ca_file: /etc/edgeplane/mirror-ca.crt}
//
// and turns it into what containerd reads: a hosts.toml per registry under
// its config_path (WriteHosts) and the CRI plugin's registry.configs auth
// entries (Auths), which containerd 1.6 and 1.7 honour next to config_path.
//
// Load is strict: an unknown key, a value of the wrong kind, an endpoint
// that is not a registry URL, a rewrite that is not a regular expression,
// a TLS file that cannot be read are refused, every one at once, each with
// the file, the line and the key.
package registries

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// DefaultFile is where a node reads registries.yaml.
const DefaultFile = "/etc/edgeplane/registries.yaml"

// maxFileSize bounds the file read.
const maxFileSize = 1 << 20

// Registries is a parsed registries.yaml.
type Registries struct {
	// File is where it was read ("" when there was no file).
	File string
	// Mirrors maps a registry host (docker.io, registry.example.com:5000,
	// or * for every registry) to its mirrors.
	Mirrors map[string]Mirror
	// Configs maps a registry or mirror host (host or host:port, or * for
	// every one) to its credentials and TLS settings.
	Configs map[string]Config
}

// Mirror is the mirrors of one registry, tried in order.
type Mirror struct {
	// Endpoints are the mirrors' URLs, normalized: scheme://host[:port][/path]
	// (https, or http for localhost with a port, when the file gave none).
	Endpoints []string
	// Rewrites maps a regular expression on the repository to its
	// replacement. containerd does not apply them from hosts.toml (see
	// WriteHosts); Warnings says so.
	Rewrites map[string]string
}

// Config is what a registry host needs: credentials, TLS.
type Config struct {
	Auth *AuthConfig
	TLS  *TLSConfig
}

// AuthConfig are a registry's credentials.
type AuthConfig struct {
	Username      string
	Password      string
	Auth          string // base64 of username:password
	IdentityToken string
}

// TLSConfig are a registry's TLS settings.
type TLSConfig struct {
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
}

// Auth is one credential entry for containerd's CRI plugin
// (registry.configs.<Host>.auth).
type Auth struct {
	Host          string
	Username      string
	Password      string
	Auth          string
	IdentityToken string
}

// Load reads and checks path. A missing file is no error: it gives
// Registries with nothing in it (and File ""), so that a node without
// registries.yaml pulls from the registries themselves.
func Load(path string) (*Registries, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Registries{Mirrors: map[string]Mirror{}, Configs: map[string]Config{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registries file %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("registries file %s is larger than %d bytes", path, maxFileSize)
	}
	return Parse(path, data)
}

// Parse checks data, the content of file (named in errors).
func Parse(file string, data []byte) (*Registries, error) {
	r, errs := parse(file, data)
	if err := problems(errs); err != nil {
		return nil, err
	}
	r.File = file
	return r, nil
}

// Warnings are what the file asks that containerd will not do.
func (r *Registries) Warnings() []string {
	var out []string
	for _, host := range sortedKeys(r.Mirrors) {
		if len(r.Mirrors[host].Rewrites) > 0 {
			out = append(out, fmt.Sprintf("%s: mirrors.%q.rewrite is not applied: containerd's hosts.toml has no rewrites (a k3s containerd feature); pulls through the mirror keep the repository's name", r.File, host))
		}
	}
	return out
}

// Auths returns the credential entries for containerd's CRI plugin, one per
// configs host with an auth, sorted by host. docker.io's is given for
// registry-1.docker.io, the host containerd asks credentials for. The CRI
// plugin matches hosts exactly, so an auth for * is given for every mirror
// endpoint and mirrored registry that has no configs entry of its own.
func (r *Registries) Auths() []Auth {
	byHost := map[string]*AuthConfig{}
	for host, c := range r.Configs {
		if c.Auth != nil && host != "*" {
			byHost[apiHost(host)] = c.Auth
		}
	}
	if wild := r.Configs["*"].Auth; wild != nil {
		for host, m := range r.Mirrors {
			hosts := []string{}
			if host != "*" {
				hosts = append(hosts, host)
			}
			for _, ep := range m.Endpoints {
				if u, err := url.Parse(ep); err == nil {
					hosts = append(hosts, u.Host)
				}
			}
			for _, h := range hosts {
				if _, own := r.Configs[h]; !own {
					if _, ok := byHost[apiHost(h)]; !ok {
						byHost[apiHost(h)] = wild
					}
				}
			}
		}
	}
	var out []Auth
	for _, host := range sortedKeys(byHost) {
		a := byHost[host]
		out = append(out, Auth{Host: host, Username: a.Username, Password: a.Password, Auth: a.Auth, IdentityToken: a.IdentityToken})
	}
	return out
}

// apiHost is the host containerd talks to for a registry name: docker.io
// is served at registry-1.docker.io.
func apiHost(host string) string {
	if host == "docker.io" {
		return "registry-1.docker.io"
	}
	return host
}

// checkHost checks a registry host key: host, host:port, or *.
func checkHost(host string) error {
	if host == "*" {
		return nil
	}
	if host == "" {
		return errors.New("the registry host is empty")
	}
	u, err := url.Parse("//" + host)
	if err != nil || u.Host != host || u.Hostname() == "" {
		return fmt.Errorf("%q is not a registry host (host or host:port, e.g. registry.example.com:5000, or * for every registry)", host)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port %q is not a port number", host, p)
		}
	}
	return nil
}

// normalizeEndpoint checks a mirror endpoint and returns it as
// scheme://host[:port][/path].
func normalizeEndpoint(endpoint string) (string, error) {
	s := strings.TrimSpace(endpoint)
	if s == "" {
		return "", errors.New("the endpoint is empty")
	}
	if !strings.Contains(s, "://") {
		s = "//" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("endpoint %q is not a URL: %v", endpoint, err)
	}
	switch {
	case u.Scheme != "" && u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("endpoint %q: scheme %q is not http or https", endpoint, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("endpoint %q has no host (want e.g. https://mirror.example.com:5000)", endpoint)
	case u.User != nil:
		return "", fmt.Errorf("endpoint %q holds credentials: put them under configs.%q.auth", endpoint, u.Host)
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("endpoint %q has a query or fragment, which a registry URL has not", endpoint)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("endpoint %q: port %q is not a port number", endpoint, p)
		}
	}
	if u.Scheme == "" {
		u.Scheme = "https"
		if isLocalhost(u.Hostname()) && u.Port() != "" && u.Port() != "443" {
			u.Scheme = "http"
		}
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u.String(), nil
}

func isLocalhost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkRewrite(expr string) error {
	if _, err := regexp.Compile(expr); err != nil {
		return fmt.Errorf("%q is not a regular expression: %v", expr, err)
	}
	return nil
}

// checkAuth checks that the credentials are a whole set.
func checkAuth(a *AuthConfig) []string {
	var bad []string
	if (a.Username == "") != (a.Password == "") {
		bad = append(bad, "username and password go together: give both or neither")
	}
	if a.Auth != "" {
		b, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil || !strings.Contains(string(b), ":") {
			bad = append(bad, "auth is not the base64 of username:password")
		}
	}
	if a.Username == "" && a.Auth == "" && a.IdentityToken == "" {
		bad = append(bad, "no credentials: give username and password, auth, or identity_token")
	}
	return bad
}

// checkFile checks that a TLS file is there and readable.
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
