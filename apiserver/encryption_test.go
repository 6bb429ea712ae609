package apiserver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	etcdkube "go.etcd.io/etcd/client/v3/kubernetes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/internal/teststore"
)

// encryptionConfig writes an EncryptionConfiguration for secrets with the
// given aescbc keys (name → 32 bytes), first key first, identity last.
func encryptionConfig(t *testing.T, keys ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k, base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%-32s", k))))
	}
	b.WriteString("  - identity: {}\n")
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newStorageIn is newStorage on dir/state.db.
func newStorageIn(t *testing.T, dir string) *etcdkube.Client {
	t.Helper()
	return teststore.Local(t, dir)
}

// serveEncrypted starts an API server over client that encrypts as the
// config file says.
func serveEncrypted(t *testing.T, client *etcdkube.Client, config string) *kubernetes.Clientset {
	t.Helper()
	tr, err := apiserver.LoadEncryptionConfig(context.Background(), config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := serveAPIWith(t, apiserver.Config{Client: client, Transformers: tr})
	return kubernetes.NewForConfigOrDie(cfg)
}

// storedValue is the raw value under key, as an etcd reader sees it.
func storedValue(t *testing.T, client *etcdkube.Client, key string) []byte {
	t.Helper()
	resp, err := client.Client.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d values)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}

func TestEncryption_SecretsAtRest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	client := newStorageIn(t, dir)
	cs := serveEncrypted(t, client, encryptionConfig(t, "key1"))
	const plain = "hunter2-very-secret-value"
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"password": plain}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "plain-config-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{})
	if err != nil || string(got.Data["password"]) != plain {
		t.Fatalf("read back: %v %q", err, got.Data["password"])
	}
	if v := storedValue(t, client, "/registry/secrets/default/db"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("stored secret starts %q, want k8s:enc:aescbc:v1:key1:", v[:min(len(v), 40)])
	}
	if v := storedValue(t, client, "/registry/configmaps/default/cm"); !bytes.Contains(v, []byte("plain-config-value")) {
		t.Fatalf("configmaps are not named by the config, yet stored as %q", v)
	}
	// Every file SQLite writes (the database and its WAL): no plain text.
	files, _ := filepath.Glob(filepath.Join(dir, "state.db*"))
	if len(files) == 0 {
		t.Fatal("no database files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(plain)) {
			t.Fatalf("%s holds the secret in plain text", f)
		}
	}
}

func TestEncryption_KeyRotation(t *testing.T) {
	ctx := context.Background()
	client := newStorageIn(t, t.TempDir())
	key := "/registry/secrets/default/"
	old := serveEncrypted(t, client, encryptionConfig(t, "key1"))
	if _, err := old.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old"}, StringData: map[string]string{"v": "one"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// key2 added first: it writes, both read.
	cs := serveEncrypted(t, client, encryptionConfig(t, "key2", "key1"))
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "new"}, StringData: map[string]string{"v": "two"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"old": "one", "new": "two"} {
		s, err := cs.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || string(s.Data["v"]) != want {
			t.Fatalf("read %s after rotation: %v %q", name, err, s.Data["v"])
		}
	}
	if v := storedValue(t, client, key+"old"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("old secret stored %q before the rewrite", v[:30])
	}
	if v := storedValue(t, client, key+"new"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Fatalf("new secret stored %q", v[:30])
	}
	// The rewrite (as `kubectl get secrets -o json | kubectl replace -f -`).
	s, err := cs.CoreV1().Secrets("default").Get(ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := storedValue(t, client, key+"old"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Fatalf("rewritten secret stored %q", v[:30])
	}
	// Once key1 is dropped, everything still reads.
	only2 := serveEncrypted(t, client, encryptionConfig(t, "key2"))
	if s, err := only2.CoreV1().Secrets("default").Get(ctx, "old", metav1.GetOptions{}); err != nil || string(s.Data["v"]) != "one" {
		t.Fatalf("read with key2 alone: %v", err)
	}
}

func TestLoadEncryptionConfig_Invalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n      - name: k\n        secret: c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := apiserver.LoadEncryptionConfig(context.Background(), path); err == nil {
		t.Fatal("a 5-byte aescbc key was accepted")
	}
	if _, err := apiserver.LoadEncryptionConfig(context.Background(), filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}
