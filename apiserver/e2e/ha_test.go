package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
)

// TestAPIServer_SharedDatabase runs two `sqlkube apiserver --datastore`
// on one PostgreSQL (and one MySQL) database, as an HA deployment does:
// what one writes the other reads, and a watch on one sees writes made
// through the other.
func TestAPIServer_SharedDatabase(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	for _, b := range sqltest.Backends() {
		if b.Name == sqltest.SQLite {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			dsn := b.NewDSN(t)
			one := startCommand(t, t.TempDir(), "apiserver", "--datastore", dsn)
			// The second joins the cluster identity the first stored.
			two := startCommand(t, t.TempDir(), "apiserver", "--datastore", dsn, "--token-file", filepath.Join(one.dataDir, "token"))

			// An object listed before the watch starts, so that the watch
			// is known to be running once it is printed.
			one.mustKubectl(t, bin, "create", "configmap", "before")
			lines := two.kubectlLines(t, bin, "get", "cm", "-w", "-o", "name")
			if !lines.Scan() || !strings.Contains(lines.Text(), "configmap/before") {
				t.Fatalf("the watch did not list the first configmap: %q", lines.Text())
			}

			one.mustKubectl(t, bin, "create", "configmap", "shared", "--from-literal=k=v")
			if got := two.mustKubectl(t, bin, "get", "cm", "shared", "-o", "jsonpath={.data.k}"); got != "v" {
				t.Fatalf("the second API server reads %q", got)
			}
			for lines.Scan() {
				if strings.Contains(lines.Text(), "configmap/shared") {
					return
				}
			}
			t.Fatalf("the watch on the second API server never saw the configmap created through the first")
		})
	}
}
