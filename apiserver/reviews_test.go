package apiserver_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestReviews_SelfSubjectAccessReview(t *testing.T) {
	s := newSecuredServer(t)
	bindBobToConfigMapReader(t, s)
	ctx := context.Background()
	bob := s.as("bob-token")
	for _, tc := range []struct {
		namespace, verb, resource string
		want                      bool
	}{
		{"team-a", "list", "configmaps", true},
		{"team-a", "get", "configmaps", true},
		{"team-a", "delete", "configmaps", false},
		{"default", "list", "configmaps", false},
		{"team-a", "list", "secrets", false},
	} {
		got, err := bob.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.namespace, Verb: tc.verb, Resource: tc.resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("can bob %s %s in %s: %v (%s), want %v", tc.verb, tc.resource, tc.namespace, got.Status.Allowed, got.Status.Reason, tc.want)
		}
	}
	// Non-resource URLs: every authenticated user may read /version.
	got, err := bob.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/version", Verb: "get"}},
	}, metav1.CreateOptions{})
	if err != nil || !got.Status.Allowed {
		t.Errorf("can bob get /version: %+v %v", got, err)
	}
	// Neither or both attributes: 422.
	_, err = bob.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a review without attributes: %v, want 422", err)
	}
}

func TestReviews_SelfSubjectRulesReview(t *testing.T) {
	s := newSecuredServer(t)
	bindBobToConfigMapReader(t, s)
	ctx := context.Background()
	got, err := s.as("bob-token").AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "team-a"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Incomplete {
		t.Errorf("bob's rules are incomplete: %s", got.Status.EvaluationError)
	}
	var cm, reviews bool
	for _, r := range got.Status.ResourceRules {
		cm = cm || slices.Contains(r.Resources, "configmaps") && slices.Equal(r.Verbs, []string{"get", "list"})
		reviews = reviews || slices.Contains(r.Resources, "selfsubjectaccessreviews")
	}
	if !cm || !reviews {
		t.Errorf("bob's rules in team-a lack the role's configmaps or system:basic-user's reviews: %+v", got.Status.ResourceRules)
	}
	// In default bob has only what every authenticated user has.
	got, err = s.as("bob-token").AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got.Status.ResourceRules {
		if slices.Contains(r.Resources, "configmaps") {
			t.Errorf("bob has a configmaps rule in default: %+v", r)
		}
	}
}

func TestReviews_SubjectAccessReview(t *testing.T) {
	s := newSecuredServer(t)
	bindBobToConfigMapReader(t, s)
	ctx := context.Background()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "bob",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "list", Resource: "configmaps"},
	}}
	got, err := s.as("admin-token").AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil || !got.Status.Allowed {
		t.Fatalf("may bob list configmaps in team-a: %+v %v", got, err)
	}
	// Asking about others is itself authorized: alice may not.
	if _, err := s.as("alice-token").AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice asks about bob: %v, want 403", err)
	}
	// The local review's namespace must be the request's.
	lsar := &authorizationv1.LocalSubjectAccessReview{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "bob",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Resource: "configmaps"},
		},
	}
	got2, err := s.as("admin-token").AuthorizationV1().LocalSubjectAccessReviews("team-a").Create(ctx, lsar, metav1.CreateOptions{})
	if err != nil || !got2.Status.Allowed {
		t.Errorf("local review in team-a: %+v %v", got2, err)
	}
	lsar.Namespace, lsar.Spec.ResourceAttributes.Namespace = "default", "default"
	if _, err := s.as("admin-token").AuthorizationV1().LocalSubjectAccessReviews("team-a").Create(ctx, lsar, metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("local review of default sent to team-a: %v, want 400", err)
	}
}

func TestReviews_SelfSubjectReview(t *testing.T) {
	s := newSecuredServer(t)
	got, err := s.as("bob-token").AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := got.Status.UserInfo
	if u.Username != "bob" || u.UID != "3" || !slices.Equal(u.Groups, []string{"team", "devs", "system:authenticated"}) {
		t.Errorf("whoami as bob: %+v", u)
	}
}

func TestReviews_TokenReview(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	review := func(token string, audiences ...string) *authenticationv1.TokenReview {
		t.Helper()
		got, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("review of %q: %v", token, err)
		}
		return got
	}
	if got := review("bob-token"); !got.Status.Authenticated || got.Status.User.Username != "bob" ||
		!slices.Contains(got.Status.User.Groups, "system:authenticated") {
		t.Errorf("bob's token: %+v", got.Status)
	}
	if got := review("no-such-token"); got.Status.Authenticated {
		t.Errorf("an unknown token authenticated: %+v", got.Status)
	}
	// A static token is good only for the API's own audience.
	if got := review("bob-token", "https://kubernetes.default.svc.cluster.local"); !got.Status.Authenticated {
		t.Errorf("bob's token for the API audience: %+v", got.Status)
	}
	if got := review("bob-token", "vault"); got.Status.Authenticated {
		t.Errorf("bob's token for another audience authenticated: %+v", got.Status)
	}
	// A service-account token for an audience authenticates for it.
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, "robot", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review(tr.Status.Token, "vault"); !got.Status.Authenticated || got.Status.User.Username != "system:serviceaccount:default:robot" ||
		!slices.Equal(got.Status.Audiences, []string{"vault"}) {
		t.Errorf("robot's token for vault: %+v", got.Status)
	}
	if got := review(tr.Status.Token); got.Status.Authenticated {
		t.Errorf("robot's vault token authenticated for the API: %+v", got.Status)
	}
	// Only who may create tokenreviews asks (system:auth-delegator).
	_, err = s.as("bob-token").AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "admin-token"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("bob reviews a token: %v, want 403", err)
	}
	// An empty token is 400.
	_, err = admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("review of no token: %v, want 400", err)
	}
}

// TestReviews_CreateOnly: the reviews are in discovery with only the
// create verb; other verbs are 405 and nothing is stored.
func TestReviews_CreateOnly(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	want := map[string][]string{
		"authorization.k8s.io/v1":  {"subjectaccessreviews", "localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews"},
		"authentication.k8s.io/v1": {"selfsubjectreviews", "tokenreviews"},
	}
	for gv, names := range want {
		list, err := admin.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == name })
			if i < 0 {
				t.Errorf("%s: no %s in discovery", gv, name)
				continue
			}
			if r := list.APIResources[i]; !slices.Equal(r.Verbs, []string{"create"}) || r.Namespaced != (name == "localsubjectaccessreviews") {
				t.Errorf("%s %s: verbs %v namespaced %v", gv, name, r.Verbs, r.Namespaced)
			}
		}
	}
	rc := admin.AuthorizationV1().RESTClient()
	err := rc.Get().AbsPath("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").Do(ctx).Error()
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusMethodNotAllowed {
		t.Errorf("list selfsubjectaccessreviews: %v, want 405", err)
	}
	// A body of another kind is 400, never 500.
	err = rc.Post().AbsPath("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").
		Body([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)).Do(ctx).Error()
	if !apierrors.IsBadRequest(err) {
		t.Errorf("a ConfigMap posted as a review: %v, want 400", err)
	}
	err = rc.Post().AbsPath("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").Body([]byte(`{not json`)).Do(ctx).Error()
	if !apierrors.IsBadRequest(err) {
		t.Errorf("garbage posted as a review: %v, want 400", err)
	}
	// OpenAPI documents the create.
	body, err := admin.Discovery().RESTClient().Get().AbsPath("/openapi/v3/apis/authorization.k8s.io/v1").DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), "createAuthorizationV1SelfSubjectAccessReview") {
		t.Errorf("openapi v3 of authorization.k8s.io/v1 lacks the review's create (%v)", err)
	}
	// Callers without credentials are system:anonymous, whom RBAC's
	// bootstrap policy gives no review: 403, not an answer, as
	// kube-apiserver.
	anon := kubernetes.NewForConfigOrDie(&rest.Config{Host: s.url})
	if _, err := anon.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("whoami without credentials: %v, want 403", err)
	}
}
