package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/identity"
)

// TestServer_SharedIdentity: two `sqlkube server` on one PostgreSQL
// database are one cluster with one identity. The first generates the
// cluster token into DATA_DIR/token and stores its CAs in the datastore;
// a second with a wrong token, or none, is refused and writes no CA; the
// second with the token has the same CAs and service-account key, and
// each server's admin kubeconfig and service-account tokens work on the
// other.
func TestServer_SharedIdentity(t *testing.T) {
	bin := kubectls(t)["kubectl"]
	var pg *sqltest.Backend
	for _, b := range sqltest.Backends() {
		if b.Name == "postgres" {
			pg = &b
		}
	}
	if pg == nil {
		t.Skip("skipping: SQLKUBE_TEST_BACKENDS leaves out postgres")
	}
	dsn := pg.NewDSN(t)
	light := []string{"--controllers=-*", "--disable-scheduler"}
	dirA := t.TempDir()
	a := startCommand(t, dirA, append([]string{"server", "--datastore", dsn}, light...)...)
	tokenFile := filepath.Join(dirA, "token")
	st, err := os.Stat(tokenFile)
	if err != nil {
		t.Fatalf("the first server wrote no token: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", tokenFile, st.Mode().Perm())
	}
	storedRev := func() int64 {
		t.Helper()
		store, err := sqlstore.Open(context.Background(), sqlstore.Options{DSN: dsn, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		res, err := store.Range(context.Background(), sqlstore.RangeRequest{Key: []byte(identity.Key)})
		if err != nil || len(res.KVs) != 1 {
			t.Fatalf("reading %s: %v, %v", identity.Key, res, err)
		}
		return res.KVs[0].ModRevision
	}
	rev := storedRev()

	// Refused: a wrong token, and no token at all.
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"wrong token", "does not open the cluster identity", []string{"--token", "not-the-token"}},
		{"no token", "--token", nil},
	} {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		args := append([]string{"server", "--datastore", dsn, "--data-dir", dir, "--secure-port", "0", "--disable-node"}, light...)
		out, err := exec.CommandContext(ctx, sqlkubeBin, componentPortsOff(append(args, tc.args...))...).CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || timedOut {
			t.Fatalf("%s: the server did not exit with an error: %v\n%s", tc.name, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: output does not say %q:\n%s", tc.name, tc.want, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "tls", "ca.crt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused server wrote a CA (stat: %v)", tc.name, err)
		}
	}
	if got := storedRev(); got != rev {
		t.Errorf("the stored identity was rewritten (revision %d, was %d)", got, rev)
	}

	dirB := t.TempDir()
	b := startCommand(t, dirB, append([]string{"server", "--datastore", dsn, "--token-file", tokenFile}, light...)...)
	for _, name := range []string{"ca.crt", "ca.key", "client-ca.crt", "front-proxy-ca.crt", "sa.key", "sa.pub"} {
		ga, errA := os.ReadFile(filepath.Join(dirA, "tls", name))
		gb, errB := os.ReadFile(filepath.Join(dirB, "tls", name))
		if errA != nil || errB != nil || !bytes.Equal(ga, gb) {
			t.Errorf("%s differs between the servers (%v, %v)", name, errA, errB)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dirB, "token")); err != nil || !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(must(os.ReadFile(tokenFile)))) {
		t.Errorf("the second server did not keep the token in its DATA_DIR/token: %q, %v", got, err)
	}

	// Each admin kubeconfig on the other server.
	a.mustKubectl(t, bin, "create", "configmap", "from-a")
	if out := a.mustKubectl(t, bin, "--kubeconfig", b.kubeconfig, "--server", a.url, "get", "configmap", "from-a", "-o", "name"); strings.TrimSpace(out) != "configmap/from-a" {
		t.Errorf("B's kubeconfig on A: %q", out)
	}
	if out := b.mustKubectl(t, bin, "--kubeconfig", a.kubeconfig, "--server", b.url, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "kubernetes-admin" {
		t.Errorf("A's kubeconfig on B: whoami %q", out)
	}
	// A service-account token issued by A is accepted by B.
	a.mustKubectl(t, bin, "create", "serviceaccount", "robot")
	token := strings.TrimSpace(a.mustKubectl(t, bin, "create", "token", "robot"))
	if out := b.mustKubectlWith(t, b.asToken(t, token), bin, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"); out != "system:serviceaccount:default:robot" {
		t.Errorf("A's service-account token on B: whoami %q", out)
	}
	if got := storedRev(); got != rev {
		t.Errorf("the stored identity was rewritten (revision %d, was %d)", got, rev)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
