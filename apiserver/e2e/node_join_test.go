package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"
)

// TestNodeJoin: a node joins as on kubeadm clusters. With a bootstrap
// token from `sqlkube token create` it asks for a client certificate
// (a CSR for system:node:n3 in system:nodes); sqlkube server approves it
// (RBAC lets the token's group) and signs it with the client CA; the node
// then authenticates with that certificate as system:node:n3.
func TestNodeJoin(t *testing.T) {
	s := startServer(t, t.TempDir())
	ctx := context.Background()
	token := strings.TrimSpace(s.sqlkube(t, "token", "create", "--ttl", "1h"))
	boot := kubernetes.NewForConfigOrDie(s.restConfig(t, s.asToken(t, token)))

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:n3", Organization: []string{"system:nodes"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	// The token reaches the authenticator through an informer: the
	// first request may race it.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, commandTimeout, true, func(ctx context.Context) (bool, error) {
		created, err := boot.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		if err == nil {
			csr = created
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("creating the CSR with the bootstrap token: %v", err)
	}
	var signed []byte
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, commandTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := boot.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		signed = got.Status.Certificate
		return len(signed) > 0, nil
	})
	if err != nil {
		t.Fatalf("the CSR was never approved and signed: %v", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.restConfig(t, s.kubeconfig)
	cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = signed, keyPEM, "", ""
	node := kubernetes.NewForConfigOrDie(cfg)
	review, err := node.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; u.Username != "system:node:n3" || !slices.Contains(u.Groups, "system:nodes") {
		t.Errorf("the signed certificate authenticates as %+v", u)
	}
	if out := s.mustKubectl(t, kubectls(t)["kubectl"], "get", "csr"); !strings.Contains(out, "Approved,Issued") {
		t.Errorf("kubectl get csr:\n%s", out)
	}
}

// restConfig loads a client configuration from a kubeconfig file.
func (s *server) restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
