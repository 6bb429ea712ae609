package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/apiserver/pki"
	"github.com/sqlkube/sqlkube/controlplane"
)

func TestCertsRotate_Kubeconfig(t *testing.T) {
	dataDir := t.TempDir()
	files, err := pki.Ensure(filepath.Join(dataDir, "tls"), pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(kubeconfig, "https://127.0.0.1:6443", files); err != nil {
		t.Fatal(err)
	}
	oldAdmin, _ := os.ReadFile(files.AdminCert)
	ca, _ := os.ReadFile(files.CACert)

	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"certs", "rotate", "--data-dir", dataDir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	newAdmin, _ := os.ReadFile(files.AdminCert)
	newKey, _ := os.ReadFile(files.AdminKey)
	if bytes.Equal(oldAdmin, newAdmin) {
		t.Fatal("admin certificate not renewed")
	}
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.AuthInfos["admin"]; !bytes.Equal(a.ClientCertificateData, newAdmin) || !bytes.Equal(a.ClientKeyData, newKey) {
		t.Fatal("kubeconfig still embeds the old admin credentials")
	}
	if !bytes.Equal(cfg.Clusters["sqlkube"].CertificateAuthorityData, ca) || cfg.Clusters["sqlkube"].Server != "https://127.0.0.1:6443" {
		t.Fatal("kubeconfig's cluster changed")
	}
	if fi, err := os.Stat(kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode: %v %v", err, fi.Mode())
	}
	for _, want := range []string{"renewed " + files.ServingCert, "updated " + kubeconfig, "ca.crt", "apiserver.crt", "admin.crt", "RESIDUAL TIME"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	root = newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"certs", "check-expiry", "--data-dir", dataDir})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "client-ca.crt") || !strings.Contains(out.String(), "CN=kube-apiserver") {
		t.Fatalf("check-expiry: %v\n%s", err, out.String())
	}
}

func TestCertsRotate_NoPKI(t *testing.T) {
	root := newRootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"certs", "rotate", "--data-dir", t.TempDir()})
	if err := root.Execute(); err == nil {
		t.Fatal("rotate without a PKI succeeded")
	}
}
