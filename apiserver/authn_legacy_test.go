package apiserver_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"

	"github.com/sqlkube/sqlkube/apiserver/authn"
)

// A secret-based (legacy) service-account token, filled in by Kubernetes'
// tokens controller, authenticates while its secret exists and is refused
// once the secret is gone.
func TestAuthn_LegacyServiceAccountToken(t *testing.T) {
	s := newSecuredServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	loop := kubernetes.NewForConfigOrDie(s.api.Loopback())
	factory := informers.NewSharedInformerFactory(loop, 0)
	gen, err := authn.LegacyTokenGenerator(s.key)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := serviceaccountcontroller.NewTokensController(klog.FromContext(ctx), factory.Core().V1().ServiceAccounts(), factory.Core().V1().Secrets(), loop,
		serviceaccountcontroller.TokensControllerOptions{TokenGenerator: gen})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel() // informers stop, then Shutdown returns
		factory.Shutdown()
	}()
	go tokens.Run(ctx, 1)

	admin := s.as("admin-token")
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "old-style"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "old-style-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "old-style"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var token string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sec, err := admin.CoreV1().Secrets("default").Get(ctx, "old-style-token", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		token = string(sec.Data[corev1.ServiceAccountTokenKey])
		return token != "", nil
	})
	if err != nil {
		t.Fatalf("the tokens controller never filled the secret: %v", err)
	}
	// Authenticated (as the account, which may do nothing): 403, not 401.
	if _, err := s.as(token).CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("legacy token while its secret exists: %v, want 403", err)
	}
	if err := admin.CoreV1().Secrets("default").Delete(ctx, "old-style-token", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.as(token).CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Fatalf("legacy token after its secret was deleted: %v, want 401", err)
	}
}
