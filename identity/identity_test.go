package identity_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore/sqltest"
	"github.com/sqlkube/sqlkube/identity"
)

// kvOn opens the backend's datastore and returns an in-process etcd
// client on it.
func kvOn(t *testing.T, dsn string) clientv3.KV {
	t.Helper()
	ctx := context.Background()
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdshim.New(etcdshim.Options{Backend: store, Logger: zerolog.Nop()})
	c := srv.LocalClient()
	t.Cleanup(func() {
		c.Close()
		srv.Stop(0)
		store.Close()
	})
	return c.KV
}

func readAll(t *testing.T, paths []string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = data
	}
	return out
}

// TestEstablish runs on every backend: the first server stores its
// authorities, a second one (its own datastore connection, its own
// directory with a CA of its own) takes them, a wrong token is refused
// without writing anything, and the stored value is never replaced.
func TestEstablish(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		kvA, kvB := kvOn(t, dsn), kvOn(t, dsn)
		dirA := t.TempDir()
		encA := filepath.Join(t.TempDir(), "enc.yaml")
		if err := os.WriteFile(encA, []byte("kind: EncryptionConfiguration\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := identity.Establish(ctx, kvA, identity.Options{Dir: dirA, Token: "t0k3n", EncryptionConfig: encA, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Created || res.EncryptionConfig != encA {
			t.Fatalf("first server: %+v, want Created with its own encryption config", res)
		}
		stored, err := kvA.Get(ctx, identity.Key)
		if err != nil || len(stored.Kvs) != 1 {
			t.Fatalf("stored identity: %v, %v", stored, err)
		}
		if bytes.Contains(stored.Kvs[0].Value, []byte("PRIVATE KEY")) || bytes.Contains(stored.Kvs[0].Value, []byte("EncryptionConfiguration")) {
			t.Fatal("the stored identity holds plaintext")
		}
		want := readAll(t, pki.FilesIn(dirA).Authorities())

		// A wrong token: refused, nothing written in its directory.
		dirWrong := filepath.Join(t.TempDir(), "tls")
		if _, err := identity.Establish(ctx, kvB, identity.Options{Dir: dirWrong, Token: "wrong", Logger: zerolog.Nop()}); !errors.Is(err, identity.ErrWrongToken) {
			t.Fatalf("wrong token: err %v, want ErrWrongToken", err)
		}
		if _, err := os.Stat(dirWrong); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused server wrote %s (stat: %v)", dirWrong, err)
		}

		// The second server had a CA of its own: it is replaced.
		dirB := t.TempDir()
		if _, err := pki.EnsureAuthorities(dirB); err != nil {
			t.Fatal(err)
		}
		res, err = identity.Establish(ctx, kvB, identity.Options{Dir: dirB, Token: "t0k3n", Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		if res.Created {
			t.Fatal("the second server created a second identity")
		}
		got := readAll(t, pki.FilesIn(dirB).Authorities())
		for name, data := range want {
			if !bytes.Equal(got[name], data) {
				t.Errorf("%s differs between the servers", name)
			}
		}
		if res.EncryptionConfig != filepath.Join(dirB, identity.EncryptionConfigFile) {
			t.Fatalf("second server's encryption config %q", res.EncryptionConfig)
		}
		if data, err := os.ReadFile(res.EncryptionConfig); err != nil || string(data) != "kind: EncryptionConfiguration\n" {
			t.Errorf("shared encryption config: %q, %v", data, err)
		}
		if st, err := os.Stat(pki.FilesIn(dirB).CAKey); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("ca.key mode: %v, %v", st, err)
		}
		after, err := kvA.Get(ctx, identity.Key)
		if err != nil || after.Kvs[0].ModRevision != stored.Kvs[0].ModRevision {
			t.Fatalf("the stored identity changed: %v, %v", after, err)
		}
	})
}

// TestEstablish_Race: servers that start at once on an empty datastore
// end with one identity.
func TestEstablish_Race(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, b sqltest.Backend) {
		ctx := context.Background()
		dsn := b.NewDSN(t)
		const n = 3
		dirs := make([]string, n)
		kvs := make([]clientv3.KV, n)
		for i := range n {
			dirs[i], kvs[i] = t.TempDir(), kvOn(t, dsn)
		}
		created := make([]bool, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var res identity.Result
				res, errs[i] = identity.Establish(ctx, kvs[i], identity.Options{Dir: dirs[i], Token: "same", Logger: zerolog.Nop()})
				created[i] = res.Created
			})
		}
		wg.Wait()
		count := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("server %d: %v", i, errs[i])
			}
			if created[i] {
				count++
			}
		}
		if count != 1 {
			t.Fatalf("%d servers created an identity, want 1", count)
		}
		ca := readAll(t, []string{pki.FilesIn(dirs[0]).CACert})
		for i := 1; i < n; i++ {
			if got := readAll(t, []string{pki.FilesIn(dirs[i]).CACert}); !bytes.Equal(got["ca.crt"], ca["ca.crt"]) {
				t.Errorf("server %d has another CA", i)
			}
		}
	})
}

func TestEstablish_NoToken(t *testing.T) {
	kv := kvOn(t, "sqlite://"+filepath.Join(t.TempDir(), "state.db"))
	if _, err := identity.Establish(context.Background(), kv, identity.Options{Dir: t.TempDir()}); !errors.Is(err, identity.ErrNoToken) {
		t.Fatalf("err %v, want ErrNoToken", err)
	}
}
