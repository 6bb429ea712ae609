package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/authn"
	jose "gopkg.in/go-jose/go-jose.v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestOpenIDDiscovery: the service-account issuer's OpenID discovery
// document and key set are served as kube-apiserver serves them (what
// the conformance test ServiceAccountIssuerDiscovery reads from a pod):
// 404 until the server knows its external address, then readable by any
// service account, naming the issuer and the key set at that address,
// and the key set checks the tokens the server issues.
func TestOpenIDDiscovery(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("admin-token,admin,1,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cfg, api := newServerWith(t, apiserver.Config{Authenticate: true, TokenAuthFile: tokens, ServiceAccountKey: key})
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(&rest.Config{Host: cfg.Host, BearerToken: "admin-token"})
	get := func(token, path string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, resp.Header, body
	}
	if code, _, _ := get("admin-token", "/.well-known/openid-configuration"); code != http.StatusNotFound {
		t.Fatalf("before ServeOpenIDMetadata: %d, want 404", code)
	}
	if err := api.ServeOpenIDMetadata("10.0.0.1:6443"); err != nil {
		t.Fatal(err)
	}

	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"oidc-discovery-test"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A token for another audience is not for the API: the service
	// account reads the documents with one of its own.
	own, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var code int
	var header http.Header
	var body []byte
	// RBAC reads the bootstrap policy from informers.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, header, body = get(own.Status.Token, "/.well-known/openid-configuration")
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("a service account reading the discovery document: %d %s", code, body)
	}
	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Issuer != authn.DefaultServiceAccountIssuer || doc.JWKSURI != "https://10.0.0.1:6443/openid/v1/jwks" || len(doc.Algs) != 1 || doc.Algs[0] != "ES256" ||
		header.Get("Content-Type") != "application/json" || header.Get("Cache-Control") == "" {
		t.Fatalf("discovery document %s with headers %v", body, header)
	}
	code, header, body = get(own.Status.Token, "/openid/v1/jwks")
	if code != http.StatusOK || header.Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("key set: %d %v %s", code, header, body)
	}
	var keys jose.JSONWebKeySet
	if err := json.Unmarshal(body, &keys); err != nil || len(keys.Keys) != 1 {
		t.Fatalf("key set %s: %v", body, err)
	}
	sig, err := jose.ParseSigned(tr.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sig.Verify(keys.Keys[0].Key); err != nil {
		t.Fatalf("the published key does not check the server's token: %v", err)
	}
}
