package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/internal/testetcd"
)

// migrateLabel marks the objects TestDatastore_MigrateCluster creates.
const migrateLabel = "e2e=datastore-migrate"

// TestDatastore_MigrateCluster is issue 17's acceptance for moving data: a
// cluster with 1,000 objects (namespaces, configmaps with binary data,
// secrets, events) is moved with `sqlkube datastore
// migrate` SQLite → PostgreSQL → MySQL → etcd → SQLite. `sqlkube apiserver
// --etcd-servers` reads the etcd copy, and `sqlkube apiserver` the last
// SQLite copy; both give the same `kubectl get -A -o yaml` as the first
// cluster (less resourceVersions and managed fields' times), every
// object's resourceVersion is at least what it was (above it once the
// copy went through etcd), and a new write gets a resourceVersion above
// every one seen before. An online backup of the last copy, restored into
// PostgreSQL, serves the same objects again.
func TestDatastore_MigrateCluster(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	dir := t.TempDir()
	first := "sqlite://" + filepath.Join(dir, "first.db")
	pg := backendDSN(t, sqltest.Postgres)
	my := backendDSN(t, sqltest.MySQL)
	last := "sqlite://" + filepath.Join(dir, "last.db")

	s := startCommand(t, dir, "apiserver", "--datastore", first)
	objects := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(objects, clusterObjects(10, 90, 9), 0o600); err != nil {
		t.Fatal(err)
	}
	s.mustKubectl(t, bin, "create", "-f", objects)
	get := []string{"get", "namespaces,configmaps,secrets,events", "-A", "-l", migrateLabel, "-o", "yaml"}
	want, wantRVs := normalizedList(t, s.mustKubectl(t, bin, get...))
	if len(wantRVs) != 1010 {
		t.Fatalf("created %d objects, want 1010", len(wantRVs))
	}
	s.stop(t)

	legs := []string{first, pg, my}
	etcd := ""
	if addr := testetcd.Start(t, startTimeout); addr != "" {
		etcd = "etcd://" + addr
		legs = append(legs, etcd)
	}
	legs = append(legs, last)
	check := func(t *testing.T, s *server, through string) map[string]int64 {
		t.Helper()
		got, gotRVs := normalizedList(t, s.mustKubectl(t, bin, get...))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("kubectl get -A -o yaml through %s differs (-before +after):\n%s", through, diff)
		}
		for k, rv := range gotRVs {
			if rv < wantRVs[k] {
				t.Errorf("%s: resourceVersion %d through %s, below %d before", k, rv, through, wantRVs[k])
			}
		}
		return gotRVs
	}
	for i := 1; i < len(legs); i++ {
		sqlkube(t, "datastore", "migrate", "--from", legs[i-1], "--to", legs[i])
		if legs[i] == etcd {
			// kube-apiserver's storage (sqlkube apiserver --etcd-servers) reads the etcd copy.
			e := startCommand(t, dir, "apiserver", "--etcd-servers", "http://"+strings.TrimPrefix(etcd, "etcd://"))
			rvs := check(t, e, "etcd")
			for k, rv := range rvs {
				if rv <= wantRVs[k] {
					t.Errorf("%s: resourceVersion %d on etcd, not above %d on the source", k, rv, wantRVs[k])
				}
			}
			e.stop(t)
		}
	}
	if etcd == "" {
		t.Log("the etcd leg was skipped: the chain was SQLite → PostgreSQL → MySQL → SQLite")
	}

	s = startCommand(t, dir, "apiserver", "--datastore", last)
	rvs := check(t, s, last)
	var top int64
	for _, rv := range rvs {
		top = max(top, rv)
	}
	out := s.mustKubectl(t, bin, "create", "configmap", "after-migration", "-o", "jsonpath={.metadata.resourceVersion}")
	rv, err := strconv.ParseInt(out, 10, 64)
	if err != nil || rv <= top {
		t.Errorf("a configmap created after the migration has resourceVersion %q, want above %d", out, top)
	}

	// An online backup of the running cluster, restored into PostgreSQL,
	// serves the same objects.
	backup := filepath.Join(dir, "backup.db")
	sqlkube(t, "datastore", "backup", "--datastore", last, "--to", backup)
	s.stop(t)
	restored := backendDSN(t, sqltest.Postgres)
	sqlkube(t, "datastore", "restore", "--from", backup, "--to", restored)
	s = startCommand(t, dir, "apiserver", "--datastore", restored)
	check(t, s, "a restored backup")
	if got := s.mustKubectl(t, bin, "get", "configmap", "after-migration", "-o", "jsonpath={.metadata.resourceVersion}"); got != out {
		t.Errorf("after-migration has resourceVersion %s after the restore, %s before", got, out)
	}
}

// sqlkube runs the sqlkube binary to its end and logs its output.
func sqlkube(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(sqlkubeBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sqlkube %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	t.Logf("%s", strings.TrimSpace(stdout.String()))
}

// backendDSN is a fresh database on a SQL server; the test is skipped
// (failed under CI=true) when the server is unreachable.
func backendDSN(t *testing.T, name string) string {
	t.Helper()
	for _, b := range sqltest.Backends() {
		if b.Name == name {
			return b.NewDSN(t)
		}
	}
	t.Skipf("skipping: SQLKUBE_TEST_BACKENDS leaves out %s", name)
	return ""
}

// clusterObjects is a YAML list of namespaces, each with configmaps (text
// and binary data), secrets and an event, all labeled migrateLabel.
func clusterObjects(namespaces, configmaps, secrets int) []byte {
	var items []map[string]any
	meta := func(name, ns string) map[string]any {
		m := map[string]any{"name": name, "labels": map[string]any{"e2e": "datastore-migrate"}}
		if ns != "" {
			m["namespace"] = ns
		}
		return m
	}
	for n := 0; n < namespaces; n++ {
		ns := fmt.Sprintf("migrate-%d", n)
		items = append(items, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": meta(ns, "")})
		for i := 0; i < configmaps; i++ {
			bin := make([]byte, 64+i)
			for j := range bin {
				bin[j] = byte(i*31 + j*7 + n)
			}
			items = append(items, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(fmt.Sprintf("cm-%03d", i), ns),
				"data":       map[string]any{"text": fmt.Sprintf("value %d in %s: ünïcödé ✓", i, ns)},
				"binaryData": map[string]any{"blob": base64.StdEncoding.EncodeToString(bin)}})
		}
		for i := 0; i < secrets; i++ {
			items = append(items, map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta(fmt.Sprintf("secret-%d", i), ns),
				"type": "Opaque", "data": map[string]any{"password": base64.StdEncoding.EncodeToString([]byte{0, 0xff, byte(i), byte(n)})}})
		}
		items = append(items, map[string]any{"apiVersion": "v1", "kind": "Event", "metadata": meta("migrated.1", ns),
			"involvedObject": map[string]any{"kind": "ConfigMap", "name": "cm-000", "namespace": ns, "apiVersion": "v1"},
			"reason":         "Migrated", "message": "moved between datastores", "type": "Normal",
			"firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
			"source": map[string]any{"component": "e2e"}})
	}
	out, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		panic(err)
	}
	return out
}

// normalizedList parses `kubectl get -o yaml` output, takes each object's
// resourceVersion out (returned by kind/namespace/name) and managed fields'
// times, and returns the rest.
func normalizedList(t *testing.T, out string) ([]any, map[string]int64) {
	t.Helper()
	var list map[string]any
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("parse kubectl output: %v", err)
	}
	items, _ := list["items"].([]any)
	rvs := map[string]int64{}
	for _, it := range items {
		obj := it.(map[string]any)
		md := obj["metadata"].(map[string]any)
		key := fmt.Sprintf("%s/%v/%v", obj["kind"], md["namespace"], md["name"])
		rv, err := strconv.ParseInt(fmt.Sprint(md["resourceVersion"]), 10, 64)
		if err != nil {
			t.Fatalf("%s: resourceVersion %v", key, md["resourceVersion"])
		}
		rvs[key] = rv
		delete(md, "resourceVersion")
		if mfs, ok := md["managedFields"].([]any); ok {
			for _, mf := range mfs {
				delete(mf.(map[string]any), "time")
			}
		}
	}
	return items, rvs
}
