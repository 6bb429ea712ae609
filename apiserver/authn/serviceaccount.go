package authn

import (
	"context"
	"crypto"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

// DefaultServiceAccountIssuer is the issuer (and default audience) of
// service-account tokens, as kubeadm sets it.
const DefaultServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// legacyIssuer is the issuer of secret-based service-account tokens.
const legacyIssuer = "kubernetes/serviceaccount"

// ServiceAccounts signs and checks service-account tokens with the
// cluster's key.
type ServiceAccounts struct {
	Issuer    string
	Generator serviceaccount.TokenGenerator
	// Keys are the public keys that check the tokens (and that the
	// issuer's OpenID discovery document publishes).
	Keys serviceaccount.PublicKeysGetter
	// Tokens authenticates bound tokens (TokenRequest) and legacy
	// secret-based ones, which stop working once their secret is gone.
	Tokens authenticator.Token
}

// NewServiceAccounts signs tokens as issuer (DefaultServiceAccountIssuer
// when empty) with key; its Tokens read accounts, pods, secrets and nodes
// through client and trust a checked token for cacheTTL (0: 10 s;
// negative: every time checked again).
func NewServiceAccounts(key crypto.Signer, issuer string, cacheTTL time.Duration, client kubernetes.Interface) (*ServiceAccounts, error) {
	if issuer == "" {
		issuer = DefaultServiceAccountIssuer
	}
	gen, err := serviceaccount.JWTTokenGenerator(issuer, key)
	if err != nil {
		return nil, fmt.Errorf("service-account signing key: %w", err)
	}
	keys, err := serviceaccount.StaticPublicKeysGetter([]any{key.Public()})
	if err != nil {
		return nil, err
	}
	getter := clientTokenGetter{client}
	// serviceaccount_legacy_tokens_total, _stale_tokens_total and
	// _valid_tokens_total, as kube-apiserver registers them.
	serviceaccount.RegisterMetrics()
	bound := serviceaccount.JWTTokenAuthenticator([]string{issuer}, keys, authenticator.Audiences{issuer}, serviceaccount.NewValidator(getter))
	legacyValidator, err := serviceaccount.NewLegacyValidator(true, getter, client.CoreV1())
	if err != nil {
		return nil, err
	}
	legacy := serviceaccount.JWTTokenAuthenticator([]string{legacyIssuer}, keys, authenticator.Audiences{issuer}, legacyValidator)
	// Checking a token reads its service account (and pod or secret);
	// successes are kept 10 s by default, as kube-apiserver does.
	var tokens authenticator.Token = tokenUnion{bound, legacy}
	switch {
	case cacheTTL == 0:
		tokens = tokencache.New(tokens, false, 10*time.Second, 0)
	case cacheTTL > 0:
		tokens = tokencache.New(tokens, false, cacheTTL, 0)
	}
	return &ServiceAccounts{Issuer: issuer, Generator: gen, Keys: keys, Tokens: tokens}, nil
}

// tokenUnion tries each token authenticator in turn, ignoring the errors
// of those that do not recognise a token's issuer.
type tokenUnion []authenticator.Token

func (u tokenUnion) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	var firstErr error
	for _, a := range u {
		resp, ok, err := a.AuthenticateToken(ctx, token)
		if ok {
			return resp, true, nil
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return nil, false, firstErr
}

// clientTokenGetter reads what a token names through the server's own
// (loopback) client.
type clientTokenGetter struct{ client kubernetes.Interface }

func (g clientTokenGetter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return g.client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g clientTokenGetter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return g.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g clientTokenGetter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return g.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g clientTokenGetter) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return g.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// GetValidatingWebhookConfiguration and GetMutatingWebhookConfiguration
// read the webhook configuration a webhook-bound token names (1.37).
func (g clientTokenGetter) GetValidatingWebhookConfiguration(ctx context.Context, name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return g.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
}

func (g clientTokenGetter) GetMutatingWebhookConfiguration(ctx context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return g.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
}

// LegacyTokenGenerator signs secret-based service-account tokens (issuer
// kubernetes/serviceaccount) with key, for Kubernetes' tokens controller;
// the API server accepts them while their secret exists.
func LegacyTokenGenerator(key crypto.Signer) (serviceaccount.TokenGenerator, error) {
	return serviceaccount.JWTTokenGenerator(legacyIssuer, key)
}
