package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// impersonating is a client of token acting as imp.
func (s *securedServer) impersonating(token string, imp rest.ImpersonationConfig) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: s.url, BearerToken: token, Impersonate: imp})
}

func whoami(t *testing.T, cs kubernetes.Interface) (authenticationv1.UserInfo, error) {
	t.Helper()
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return r.Status.UserInfo, nil
}

func canI(t *testing.T, cs kubernetes.Interface, verb, resource, ns string) bool {
	t.Helper()
	r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: resource, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("can-i %s %s: %v", verb, resource, err)
	}
	return r.Status.Allowed
}

func TestImpersonation_AsAdmin(t *testing.T) {
	s := newSecuredServer(t)
	for _, tc := range []struct {
		name       string
		imp        rest.ImpersonationConfig
		wantName   string
		wantUID    string
		wantGroups []string
		wantExtra  map[string]authenticationv1.ExtraValue
	}{
		{name: "user", imp: rest.ImpersonationConfig{UserName: "jane"}, wantName: "jane", wantGroups: []string{"system:authenticated"}},
		{name: "user and groups", imp: rest.ImpersonationConfig{UserName: "jane", Groups: []string{"devs", "ops"}},
			wantName: "jane", wantGroups: []string{"devs", "ops", "system:authenticated"}},
		{name: "uid and extra", imp: rest.ImpersonationConfig{UserName: "jane", UID: "42", Extra: map[string][]string{"scopes": {"a", "b"}}},
			wantName: "jane", wantUID: "42", wantGroups: []string{"system:authenticated"}, wantExtra: map[string]authenticationv1.ExtraValue{"scopes": {"a", "b"}}},
		{name: "service account", imp: rest.ImpersonationConfig{UserName: "system:serviceaccount:default:nobody"},
			wantName:   "system:serviceaccount:default:nobody",
			wantGroups: []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := whoami(t, s.impersonating("admin-token", tc.imp))
			if err != nil {
				t.Fatal(err)
			}
			if u.Username != tc.wantName || u.UID != tc.wantUID || !slices.Equal(u.Groups, tc.wantGroups) || len(u.Extra) != len(tc.wantExtra) {
				t.Fatalf("whoami: %+v, want %s %q %v %v", u, tc.wantName, tc.wantUID, tc.wantGroups, tc.wantExtra)
			}
			for k, v := range tc.wantExtra {
				if !slices.Equal(u.Extra[k], v) {
					t.Errorf("extra %s: %v, want %v", k, u.Extra[k], v)
				}
			}
		})
	}
	// system:anonymous is not authenticated (so not even allowed whoami).
	_, err := whoami(t, s.impersonating("admin-token", rest.ImpersonationConfig{UserName: "system:anonymous"}))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "system:anonymous" cannot create`) {
		t.Errorf("whoami as system:anonymous: %v, want 403 naming it", err)
	}
	// Authorization sees the impersonated user: nobody may not get pods,
	// and a request it makes is refused in its name.
	nobody := s.impersonating("admin-token", rest.ImpersonationConfig{UserName: "system:serviceaccount:default:nobody"})
	if canI(t, nobody, "get", "pods", "default") {
		t.Error("can-i get pods as system:serviceaccount:default:nobody: yes")
	}
	if !canI(t, s.as("admin-token"), "get", "pods", "default") {
		t.Error("can-i get pods as admin: no")
	}
	_, err = nobody.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"system:serviceaccount:default:nobody" cannot list`) {
		t.Errorf("list pods as nobody: %v, want 403 naming nobody", err)
	}
	// system:masters given as a group is honoured, as upstream.
	if !canI(t, s.impersonating("admin-token", rest.ImpersonationConfig{UserName: "jane", Groups: []string{"system:masters"}}), "delete", "nodes", "") {
		t.Error("can-i delete nodes as jane in system:masters: no")
	}
}

func TestImpersonation_Forbidden(t *testing.T) {
	s := newSecuredServer(t)
	for name, imp := range map[string]rest.ImpersonationConfig{
		"user":            {UserName: "jane"},
		"service account": {UserName: "system:serviceaccount:kube-system:default"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := whoami(t, s.impersonating("alice-token", imp))
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "alice" cannot impersonate`) {
				t.Fatalf("alice impersonating %s: %v, want 403", imp.UserName, err)
			}
			if st := (apierrors.APIStatus)(nil); !errors.As(err, &st) || st.Status().Reason != metav1.StatusReasonForbidden {
				t.Errorf("403 is not a Forbidden Status: %#v", err)
			}
		})
	}
}

// A group, uid or extra without a user is bad input: 400, not 500.
func TestImpersonation_GroupWithoutUser(t *testing.T) {
	s := newSecuredServer(t)
	for name, header := range map[string]string{
		"group": "Impersonate-Group", "uid": "Impersonate-Uid", "extra": "Impersonate-Extra-Scopes",
	} {
		t.Run(name, func(t *testing.T) {
			err := s.as("admin-token").CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces").SetHeader(header, "x").Do(context.Background()).Error()
			if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "requested "+header+" without impersonating a user") {
				t.Fatalf("%s without a user: %v, want 400", header, err)
			}
		})
	}
}

// bob may impersonate jane only (resourceNames); the SA robot may
// impersonate the group devs only.
func TestImpersonation_ResourceNames(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	grant := func(name string, rule rbacv1.PolicyRule, subject rbacv1.Subject) {
		t.Helper()
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{subject},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grant("impersonate-jane", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"jane"}},
		rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"})
	asJane := s.impersonating("bob-token", rest.ImpersonationConfig{UserName: "jane"})
	var u authenticationv1.UserInfo
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		u, err = whoami(t, asJane)
		return err == nil, nil
	})
	if err != nil || u.Username != "jane" || !slices.Equal(u.Groups, []string{"system:authenticated"}) {
		t.Fatalf("bob as jane: %+v %v", u, err)
	}
	for name, imp := range map[string]rest.ImpersonationConfig{
		"another user":         {UserName: "joe"},
		"a service account":    {UserName: "system:serviceaccount:default:default"},
		"jane in a group":      {UserName: "jane", Groups: []string{"system:masters"}},
		"jane with another id": {UserName: "jane", UID: "1"},
	} {
		if _, err := whoami(t, s.impersonating("bob-token", imp)); !apierrors.IsForbidden(err) {
			t.Errorf("bob as %s: %v, want 403", name, err)
		}
	}
}

func TestImpersonation_ServiceAccountImpersonates(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "robot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonate-deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}, ResourceNames: []string{"deployer"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "robot-impersonates-deployer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonate-deployer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "robot"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var u authenticationv1.UserInfo
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		u, err = whoami(t, s.impersonating(token, rest.ImpersonationConfig{UserName: "deployer"}))
		return err == nil, nil
	})
	if err != nil || u.Username != "deployer" {
		t.Fatalf("robot as deployer: %+v %v", u, err)
	}
	if _, err := whoami(t, s.impersonating(token, rest.ImpersonationConfig{UserName: "admin"})); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), `"system:serviceaccount:default:robot" cannot impersonate`) {
		t.Errorf("robot as admin: %v, want 403", err)
	}
}

func TestAudit_Impersonation(t *testing.T) {
	cfg, log := auditedServer(t, "")
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "jane", Groups: []string{"devs"}}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), "x", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get as jane: %v, want 403", err)
	}
	ev := awaitEvent(t, log, isCall("get", "configmaps", "x"))
	if ev.User.Username != "kubernetes-admin" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "jane" ||
		!slices.Equal(ev.ImpersonatedUser.Groups, []string{"devs", "system:authenticated"}) || ev.ResponseStatus.Code != http.StatusForbidden {
		t.Fatalf("event: user %+v impersonated %+v status %+v", ev.User, ev.ImpersonatedUser, ev.ResponseStatus)
	}
}
