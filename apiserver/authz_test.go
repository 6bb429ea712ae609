package apiserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sqlkube/sqlkube/apiserver"
)

// securedServer is an API server with authentication on, static tokens
// for admin (system:masters), alice and bob (no bindings) and the nodes n1
// and n2 (node1-token, node2-token: system:node:NAME in system:nodes),
// service-account tokens, RBAC, and its bootstrap policy in place.
type securedServer struct {
	url string
	api *apiserver.Server
	key *ecdsa.PrivateKey
}

func newSecuredServer(t *testing.T) *securedServer {
	t.Helper()
	return newSecuredServerWith(t, apiserver.Config{})
}

// newSecuredServerWith is newSecuredServer with conf's other fields.
func newSecuredServerWith(t *testing.T, conf apiserver.Config) *securedServer {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	csv := "admin-token,admin,1,system:masters\nalice-token,alice,2\nbob-token,bob,3,\"team,devs\"\n" +
		"node1-token,system:node:n1,4,system:nodes\nnode2-token,system:node:n2,5,system:nodes\n"
	if err := os.WriteFile(tokens, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Service-account tokens are checked on every request (no cache), so
	// a deleted secret's token fails at once.
	conf.Authenticate, conf.TokenAuthFile, conf.ServiceAccountKey, conf.ServiceAccountTokenCacheTTL = true, tokens, key, -1
	cfg, api := newServerWith(t, conf)
	ctx := context.Background()
	if err := api.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	// RBAC reads roles from informers: wait until they have the
	// bootstrap policy.
	admin := kubernetes.NewForConfigOrDie(&rest.Config{Host: cfg.Host, BearerToken: "admin-token"})
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		t.Fatalf("server not ready: %v", err)
	}
	return &securedServer{url: cfg.Host, api: api, key: key}
}

func (s *securedServer) as(token string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: s.url, BearerToken: token})
}

// TestAuthn_Unauthenticated checks requests without credentials as
// kube-apiserver answers them: by default they act as system:anonymous
// and RBAC's bootstrap policy lets them read the health and version
// paths only (403 for the rest, /metrics included); with
// DisableAnonymousAuth (--anonymous-auth=false) they get 401 but on
// those paths. Bad credentials get 401 either way.
func TestAuthn_Unauthenticated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		disable bool
		refused func(error) bool
		code    int
	}{
		{"anonymous", false, apierrors.IsForbidden, http.StatusForbidden},
		{"anonymous-auth=false", true, apierrors.IsUnauthorized, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSecuredServerWith(t, apiserver.Config{DisableAnonymousAuth: tc.disable})
			ctx := context.Background()
			anon := kubernetes.NewForConfigOrDie(&rest.Config{Host: s.url})
			_, err := anon.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if !tc.refused(err) {
				t.Errorf("list without credentials: %v, want %d", err, tc.code)
			}
			if !tc.disable && !strings.Contains(fmt.Sprint(err), `User "system:anonymous" cannot list resource "namespaces"`) {
				t.Errorf("list without credentials: %v, want it to name system:anonymous", err)
			}
			for _, path := range []string{"/metrics", "/api", "/apis", "/openapi/v2"} {
				var code int
				anon.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code)
				if code != tc.code {
					t.Errorf("GET %s without credentials: %d, want %d", path, code, tc.code)
				}
			}
			if _, err := s.as("no-such-token").CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
				t.Errorf("list with an unknown token: %v, want 401", err)
			}
			for _, path := range []string{"/healthz", "/livez", "/readyz"} {
				if body, err := anon.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx); err != nil || string(body) != "ok" {
					t.Errorf("%s without credentials: %q %v", path, body, err)
				}
			}
			if _, err := anon.Discovery().ServerVersion(); err != nil {
				t.Errorf("/version without credentials: %v", err)
			}
		})
	}
}

func TestAuthz_NoBindingsIsForbidden(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	alice := s.as("alice-token")
	_, err := alice.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "alice" cannot list resource "pods"`) {
		t.Errorf("list pods: %v, want 403 naming alice", err)
	}
	_, err = alice.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create configmap: %v, want 403", err)
	}
	// Nothing was written.
	if _, err := s.as("admin-token").CoreV1().ConfigMaps("default").Get(ctx, "x", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configmap after a refused create: %v, want 404", err)
	}
	// Every authenticated user may discover the API (system:discovery).
	if _, err := alice.Discovery().ServerGroups(); err != nil {
		t.Errorf("discovery as alice: %v", err)
	}
}

func TestAuthz_NamespacedRole(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	bindBobToConfigMapReader(t, s)
	bob := s.as("bob-token")
	for name, call := range map[string]func() error{
		"list configmaps in default": func() error {
			_, err := bob.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"create a configmap in team-a": func() error {
			_, err := bob.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "y"}}, metav1.CreateOptions{})
			return err
		},
		"list secrets in team-a": func() error {
			_, err := bob.CoreV1().Secrets("team-a").List(ctx, metav1.ListOptions{})
			return err
		},
		"list configmaps in all namespaces": func() error {
			_, err := bob.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403", name, err)
		}
	}
}

func TestAuthn_ServiceAccountTokens(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Shorter than ten minutes is refused.
	_, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "builder", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](60)},
	}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a one-minute token: %v, want 422", err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "builder", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status.Token == "" || time.Until(tr.Status.ExpirationTimestamp.Time) < 59*time.Minute {
		t.Fatalf("token request status: %+v", tr.Status)
	}
	sa := s.as(tr.Status.Token)
	// Authenticated as the service account, which has no rights.
	_, err = sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:serviceaccount:default:builder") {
		t.Errorf("list pods as the service account: %v, want 403 naming it", err)
	}
	// A token for a missing service account is 404; once the account is
	// gone its tokens stop working.
	if _, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("token for a missing service account: %v, want 404", err)
	}
}

func TestAuthz_EscalationPrevented(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	// bob manages RBAC in team-a and may read configmaps there, nothing
	// more; he may also bind the "view" cluster role.
	grantInTeamA(t, s, "bob", "rbac-manager", []rbacv1.PolicyRule{
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"create", "update", "get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: []string{"view"}, Verbs: []string{"bind"}},
	}, func(ctx context.Context, cs kubernetes.Interface) error {
		_, err := cs.RbacV1().Roles("team-a").List(ctx, metav1.ListOptions{})
		return err
	})
	bob := s.as("bob-token").RbacV1()

	// What bob holds he may grant.
	if _, err := bob.Roles("team-a").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "cm-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a role within bob's rights: %v", err)
	}
	// More than he holds he may not.
	_, err := bob.Roles("team-a").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "attempting to grant RBAC permissions not currently held") {
		t.Errorf("a role granting secrets: %v, want 403 escalation", err)
	}
	// Nor may he widen an existing role by update.
	role, err := bob.Roles("team-a").Get(ctx, "cm-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules[0].Verbs = []string{"get", "delete"}
	if _, err := bob.Roles("team-a").Update(ctx, role, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("widening a role by update: %v, want 403", err)
	}
	// Binding cluster-admin would give him more than he has; view he may
	// bind.
	_, err = bob.RoleBindings("team-a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bob-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("binding cluster-admin: %v, want 403", err)
	}
	if _, err := bob.RoleBindings("team-a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-views"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("binding view, which bob may bind: %v", err)
	}
	// Nothing refused was stored.
	if _, err := admin.RbacV1().Roles("team-a").Get(ctx, "secret-reader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("refused role: %v, want 404", err)
	}
}

// grantInTeamA creates namespace team-a (unless it exists), a Role of
// rules there and a binding of it to user (whose token is USER-token),
// then waits until probe, run as the user, succeeds: the authorizer reads
// bindings from informers.
func grantInTeamA(t *testing.T, s *securedServer, user, role string, rules []rbacv1.PolicyRule, probe func(context.Context, kubernetes.Interface) error) {
	t.Helper()
	ctx := context.Background()
	admin := s.as("admin-token")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles("team-a").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("team-a").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs := s.as(user + "-token")
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return probe(ctx, cs) == nil, nil
	})
	if err != nil {
		t.Fatalf("%s never got the rights of %s: %v", user, role, err)
	}
}

// bindBobToConfigMapReader gives bob get/list on configmaps in team-a and
// waits until the authorizer sees it.
func bindBobToConfigMapReader(t *testing.T, s *securedServer) {
	t.Helper()
	grantInTeamA(t, s, "bob", "cm-reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
		func(ctx context.Context, cs kubernetes.Interface) error {
			_, err := cs.CoreV1().ConfigMaps("team-a").List(ctx, metav1.ListOptions{})
			return err
		})
}
