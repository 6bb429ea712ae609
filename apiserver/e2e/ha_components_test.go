package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestServer_SharedDatabaseOneLeader runs two `sqlkube server` on one
// PostgreSQL (and one MySQL) database: one controller manager and one
// scheduler lead (a Lease each), a Deployment is reconciled once, and
// when the first server stops the second takes both over.
func TestServer_SharedDatabaseOneLeader(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	leases := []string{"kube-controller-manager", "kube-scheduler"}
	holders := func(s *server) string {
		return s.mustKubectl(t, bin, "-n", "kube-system", "get", "lease", leases[0], leases[1], "-o", "jsonpath={.items[*].spec.holderIdentity}")
	}
	for _, b := range sqltest.Backends() {
		if b.Name == sqltest.SQLite {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			dsn := b.NewDSN(t)
			one := startCommand(t, t.TempDir(), "server", "--datastore", dsn)
			// One holds both leases before the other starts, so that the
			// hand-over below is a real one.
			var first string
			until(t, commandTimeout, "the first server to lead", func() (bool, error) {
				out, err := one.kubectl(t, bin, "-n", "kube-system", "get", "lease", leases[0], leases[1], "-o", "jsonpath={.items[*].spec.holderIdentity}")
				first = out
				return err == nil && len(strings.Fields(out)) == 2, nil
			})
			two := startCommand(t, t.TempDir(), "server", "--datastore", dsn, "--fake-nodes", "2", "--token-file", filepath.Join(one.dataDir, "token"))
			two.mustKubectl(t, bin, "create", "deployment", "web", "--image=nginx", "--replicas=3")
			two.waitKubectl(t, bin, "Running Running Running", "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.phase}")
			if rs := strings.Fields(two.mustKubectl(t, bin, "get", "rs", "-l", "app=web", "-o", "name")); len(rs) != 1 {
				t.Fatalf("ReplicaSets of one Deployment on two servers: %v", rs)
			}
			if got := holders(two); got != first {
				t.Fatalf("lease holders changed while the first server ran: %q, then %q", first, got)
			}

			one.stop(t)
			until(t, commandTimeout, "the second server to take both leases over", func() (bool, error) {
				h := strings.Fields(holders(two))
				return len(h) == 2 && !strings.Contains(first, h[0]) && !strings.Contains(first, h[1]), nil
			})
			two.mustKubectl(t, bin, "create", "deployment", "after", "--image=nginx", "--replicas=2")
			two.waitKubectl(t, bin, "Running Running", "get", "pods", "-l", "app=after", "-o", "jsonpath={.items[*].status.phase}")
		})
	}
}
