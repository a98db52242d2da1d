package datastore

import (
	"errors"
	"testing"
)

func TestBenignEtcd(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		err       error
		want      bool
	}{
		{"single port", "Running http and grpc server on single port. This is not recommended for production.", nil, true},
		{"closed listener on stop", "serving", errors.New("accept tcp 127.0.0.1:2379: use of closed network connection"), true},
		{"storage version before the first backend commit", "failed to update storage version", errors.New("cannot detect storage schema version: missing term information"), true},
		{"storage version, another cause", "failed to update storage version", errors.New("cannot create migration plan: version \"3.5.0\" is not supported"), false},
		{"another message with the same cause", "failed to detect schema", errors.New("missing term information"), false},
		{"an error without cause", "failed to update storage version", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := benignEtcd(tc.msg, tc.err); got != tc.want {
				t.Errorf("benignEtcd(%q, %v) = %v, want %v", tc.msg, tc.err, got, tc.want)
			}
		})
	}
}
