package apiserver_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/bootstraptoken"
)

// whoamiEventually waits until token authenticates (the server learns of
// token secrets through an informer) and returns who it is.
func whoamiEventually(t *testing.T, client kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	var got *authenticationv1.SelfSubjectReview
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the token never authenticated: %v", err)
	}
	return got.Status.UserInfo
}

func TestAuthn_BootstrapTokens(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	token, err := bootstraptoken.Create(ctx, admin, bootstraptoken.Options{TTL: time.Hour, Description: "join n3"})
	if err != nil {
		t.Fatal(err)
	}
	boot := s.as(token)
	u := whoamiEventually(t, boot)
	if u.Username != "system:bootstrap:"+token[:6] ||
		!slices.Equal(u.Groups, []string{"system:bootstrappers", bootstraptoken.DefaultGroup, "system:authenticated"}) {
		t.Errorf("bootstrap token's user: %+v", u)
	}
	// Usable only as the bootstrap policy lets bootstrappers: nothing
	// beyond what every authenticated user may do.
	if _, err := boot.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list kube-system secrets with a bootstrap token: %v, want 403", err)
	}
	if _, err := boot.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create a node with a bootstrap token: %v, want 403", err)
	}
	// What joining nodes do with it (ask for a client certificate) the
	// node-bootstrapper role allows, as on kubeadm clusters.
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := boot.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Verb: "create",
			}},
		}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	})
	if err != nil {
		t.Errorf("a bootstrap token may not create CSRs: %v", err)
	}
	// A wrong secret for a known ID does not authenticate.
	if _, err := s.as(token[:7]+"0123456789abcdef").CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("a wrong secret: %v, want 401", err)
	}

	tokens, err := bootstraptoken.List(ctx, admin)
	if err != nil || len(tokens) != 1 || tokens[0].Token != token || tokens[0].Description != "join n3" ||
		time.Until(tokens[0].Expires) < 59*time.Minute || !slices.Equal(tokens[0].Usages, []string{"authentication", "signing"}) {
		t.Errorf("list: %+v %v", tokens, err)
	}
	if _, err := bootstraptoken.Create(ctx, admin, bootstraptoken.Options{Token: token}); !errors.Is(err, bootstraptoken.ErrExists) {
		t.Errorf("create the same token again: %v, want ErrExists", err)
	}
	if _, err := bootstraptoken.Create(ctx, admin, bootstraptoken.Options{Token: "NOT-A-TOKEN"}); !errors.Is(err, bootstraptoken.ErrInvalidToken) {
		t.Errorf("create a malformed token: %v, want ErrInvalidToken", err)
	}

	// Deleted: refused (once the informer sees it).
	if err := bootstraptoken.Delete(ctx, admin, token); err != nil {
		t.Fatal(err)
	}
	unauthorized(t, boot, "a deleted token")
	if err := bootstraptoken.Delete(ctx, admin, token[:6]); !errors.Is(err, bootstraptoken.ErrNotFound) {
		t.Errorf("delete it again: %v, want ErrNotFound", err)
	}
}

func TestAuthn_BootstrapTokenExpired(t *testing.T) {
	s := newSecuredServer(t)
	ctx := context.Background()
	admin := s.as("admin-token")
	// Expired an hour ago.
	if _, err := admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{
			"token-id": "abcdef", "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
			"expiration": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Not for authentication.
	if _, err := bootstraptoken.Create(ctx, admin, bootstraptoken.Options{Token: "ghijkl.0123456789abcdef", Usages: []string{"signing"}}); err != nil {
		t.Fatal(err)
	}
	// A valid one, to know when the informer has caught up.
	good, err := bootstraptoken.Create(ctx, admin, bootstraptoken.Options{Token: "mnopqr.0123456789abcdef"})
	if err != nil {
		t.Fatal(err)
	}
	whoamiEventually(t, s.as(good))
	for _, tok := range []string{"abcdef.0123456789abcdef", "ghijkl.0123456789abcdef"} {
		if _, err := s.as(tok).CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			t.Errorf("token %s: %v, want 401", tok, err)
		}
	}
}

// unauthorized waits until client's requests get 401.
func unauthorized(t *testing.T, client kubernetes.Interface, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return apierrors.IsUnauthorized(err), nil
	})
	if err != nil {
		t.Errorf("%s still authenticates", what)
	}
}
