package e2e

import (
	"strings"
	"testing"
)

func TestSqlkube_BadStart(t *testing.T) {
	for _, c := range []struct {
		name      string
		datastore string
		want      []string
	}{
		{"unknown scheme", "oracle://scott:tiger@db.example:1521/orcl", []string{"unknown datastore", "oracle://"}},
		{"unreachable postgres", "postgres://postgres:hunter2@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", []string{"127.0.0.1:1", "connect"}},
		{"sqlite without a path", "sqlite://", []string{"no path"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"etcd", "--listen-address=127.0.0.1:0", "--datastore=" + c.datastore}
			wantStartError(t, args, c.want...)
			// The error must not give the password away.
			r := runSqlkube(t, args...)
			for _, secret := range []string{"tiger", "hunter2"} {
				if strings.Contains(r.stderr, secret) {
					t.Errorf("error %q shows the datastore password", r.stderr)
				}
			}
		})
	}
}
