package datastore

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzEndpointKind feeds --datastore-endpoint values, built from a scheme, a
// user, a password and the rest, to EndpointKind. Errors name the flag and
// never show the password; accepted etcd endpoints are URLs with a host and
// a port each, accepted sqlite paths carry no query.
func FuzzEndpointKind(f *testing.F) {
	for _, seed := range [][4]string{
		{"https", "", "", "127.0.0.1:2379"},
		{"https", "", "", "10.0.0.1:2379,https://10.0.0.2:2379"},
		{"http", "", "", "[::1]:2379"},
		{"https", "", "", "host"},
		{"https", "u", "s3cretPW", "host"},
		{"https", "u", "s3cretPW", "host:2379, https://h2"},
		{"postgres", "edge", "s3cretPW", "db:5432/edgeplane?sslmode=disable"},
		{"postgresql", "edge", "s3cretPW%zz", "db/x"},
		{"postgres", "edge", "s3cret PW", "/x"},
		{"sqlite", "", "", "/var/lib/state.db"},
		{"sqlite", "", "", "/x?_journal=wal"},
		{"mysql", "root", "s3cretPW", "db:3306/x"},
		{"", "", "", "127.0.0.1:2379"},
		{"HTTPS", "", "", "h:1"},
		{"https", "", "", "h:99999"},
		{"https", "", "", "h:0x1"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string) {
		endpoint := scheme + "://" + rest
		if user != "" || password != "" {
			endpoint = scheme + "://" + user + ":" + password + "@" + rest
		}
		kind, shared, err := EndpointKind(endpoint)
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "--datastore-endpoint") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			// Only a password that is not also part of the rest of the
			// endpoint (or of the message's own words) can be checked.
			if len(password) >= 6 && !strings.Contains(scheme+user+rest+"--datastore-endpoint: want https://host:2379[,...], postgres://... or sqlite://path unknown scheme is not an etcd URL such as https://10.0.0.1:2379 not a PostgreSQL URL such as postgres://user:password@host:5432/edgeplane", password) &&
				strings.Contains(msg, password) {
				t.Fatalf("error shows the password %q: %v", password, err)
			}
			return
		}
		switch kind {
		case TypeExternalEtcd:
			if !shared {
				t.Fatalf("%q: etcd endpoint not shared", endpoint)
			}
			for _, ep := range strings.Split(endpoint, ",") {
				u, err := url.Parse(strings.TrimSpace(ep))
				if err != nil || u.Host == "" || u.Port() == "" {
					t.Fatalf("accepted %q with member %q without host and port (%v)", endpoint, ep, err)
				}
			}
		case TypePostgres:
			if !shared {
				t.Fatalf("%q: postgres endpoint not shared", endpoint)
			}
		case TypeSQLite:
			if shared || strings.ContainsAny(endpoint[len("sqlite://"):], "?#%") {
				t.Fatalf("accepted sqlite endpoint %q (shared %v)", endpoint, shared)
			}
		default:
			t.Fatalf("%q: unknown kind %q", endpoint, kind)
		}
	})
}
