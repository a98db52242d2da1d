package registries

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/edgeplane/edgeplane/pkg/config"
)

// problems joins the problems of a file, as the server's config file does.
func problems(errs []error) error { return config.Problems("registries", errs) }

// parser walks the YAML tree, collecting every problem.
type parser struct {
	file string
	errs []error
}

func (p *parser) bad(n *yaml.Node, key, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, fmt.Errorf("%s:%d: key %s: %s", p.file, line, key, fmt.Sprintf(format, args...)))
}

func parse(file string, data []byte) (r *Registries, errs []error) {
	r = &Registries{Mirrors: map[string]Mirror{}, Configs: map[string]Config{}}
	defer func() {
		// A bad file must never crash the node with a stack trace.
		if x := recover(); x != nil {
			errs = []error{fmt.Errorf("%s: cannot parse YAML: %v", file, x)}
		}
	}()
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		return r, []error{fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return r, []error{fmt.Errorf("%s:%d: only one YAML document is allowed", file, extra.Line)}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return r, nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return r, nil
	}
	p := &parser{file: file}
	p.mapping(root, "(top level)", []string{"mirrors", "configs"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "mirrors":
			p.mapping(v, "mirrors", nil, func(host string, k, v *yaml.Node) {
				path := fmt.Sprintf("mirrors.%q", host)
				if err := checkHost(host); err != nil {
					p.bad(k, path, "%v", err)
					return
				}
				r.Mirrors[host] = p.mirror(v, path)
			})
		case "configs":
			p.mapping(v, "configs", nil, func(host string, k, v *yaml.Node) {
				path := fmt.Sprintf("configs.%q", host)
				if err := checkHost(host); err != nil {
					p.bad(k, path, "%v", err)
					return
				}
				r.Configs[host] = p.config(v, path)
			})
		}
	})
	return r, p.errs
}

// mapping calls fn for each key of the mapping n (at path) in file order.
// With allowed set, other keys are refused.
func (p *parser) mapping(n *yaml.Node, path string, allowed []string, fn func(key string, k, v *yaml.Node)) {
	n = config.ResolveAlias(n)
	if n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null") {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.bad(n, path, "want a mapping, got %s", config.KindName(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.bad(k, path, "a key must be a name, got %s", config.KindName(k))
			continue
		}
		sub := k.Value
		if path != "(top level)" {
			sub = path + "." + k.Value
		}
		if first, dup := seen[k.Value]; dup {
			p.bad(k, sub, "repeats the one on line %d", first)
			continue
		}
		seen[k.Value] = k.Line
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			p.bad(k, sub, "unknown key %q (allowed here: %s)", k.Value, strings.Join(allowed, ", "))
			continue
		}
		fn(k.Value, k, v)
	}
}

func (p *parser) mirror(n *yaml.Node, path string) Mirror {
	var m Mirror
	p.mapping(n, path, []string{"endpoint", "rewrite"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "endpoint":
			v = config.ResolveAlias(v)
			if v.Kind != yaml.SequenceNode {
				p.bad(v, path+".endpoint", "want a list of URLs, got %s", config.KindName(v))
				return
			}
			seen := map[string]bool{}
			for i, item := range v.Content {
				at := fmt.Sprintf("%s.endpoint[%d]", path, i)
				s, ok := p.str(item, at)
				if !ok {
					continue
				}
				u, err := normalizeEndpoint(s)
				if err != nil {
					p.bad(item, at, "%v", err)
					continue
				}
				if seen[u] {
					p.bad(item, at, "endpoint %q is listed twice", s)
					continue
				}
				seen[u] = true
				m.Endpoints = append(m.Endpoints, u)
			}
		case "rewrite":
			m.Rewrites = map[string]string{}
			p.mapping(v, path+".rewrite", nil, func(expr string, k, v *yaml.Node) {
				at := fmt.Sprintf("%s.rewrite[%q]", path, expr)
				if err := checkRewrite(expr); err != nil {
					p.bad(k, at, "%v", err)
					return
				}
				if s, ok := p.str(v, at); ok {
					m.Rewrites[expr] = s
				}
			})
		}
	})
	return m
}

func (p *parser) config(n *yaml.Node, path string) Config {
	var c Config
	p.mapping(n, path, []string{"auth", "tls"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "auth":
			a := &AuthConfig{}
			fields := map[string]*string{"username": &a.Username, "password": &a.Password, "auth": &a.Auth, "identity_token": &a.IdentityToken}
			p.mapping(v, path+".auth", []string{"username", "password", "auth", "identity_token"}, func(key string, k, v *yaml.Node) {
				if s, ok := p.str(v, path+".auth."+key); ok {
					*fields[key] = s
				}
			})
			for _, problem := range checkAuth(a) {
				p.bad(k, path+".auth", "%s", problem)
			}
			c.Auth = a
		case "tls":
			t := &TLSConfig{}
			files := map[string]*string{"ca_file": &t.CAFile, "cert_file": &t.CertFile, "key_file": &t.KeyFile}
			p.mapping(v, path+".tls", []string{"ca_file", "cert_file", "key_file", "insecure_skip_verify"}, func(key string, k, v *yaml.Node) {
				at := path + ".tls." + key
				if key == "insecure_skip_verify" {
					v = config.ResolveAlias(v)
					if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
						p.bad(v, at, "want true or false, got %s", config.KindName(v))
						return
					}
					t.InsecureSkipVerify = v.Value == "true" || v.Value == "True" || v.Value == "TRUE"
					return
				}
				s, ok := p.str(v, at)
				if !ok {
					return
				}
				if err := checkFile(s); err != nil {
					p.bad(v, at, "%v", err)
					return
				}
				*files[key] = s
			})
			if (t.CertFile == "") != (t.KeyFile == "") {
				p.bad(k, path+".tls", "cert_file and key_file go together: give both or neither")
			}
			c.TLS = t
		}
	})
	return c
}

// str returns a scalar's value; a mapping, a list or nothing is refused.
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	n = config.ResolveAlias(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		p.bad(n, path, "want a string, got %s", config.KindName(n))
		return "", false
	}
	return n.Value, true
}
