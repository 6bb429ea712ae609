// Package authn holds the API server's authenticators: verified client
// certificates, static tokens (--token-auth-file), service-account tokens
// (bound and secret-based) and bootstrap tokens, joined as kube-apiserver
// joins them. The filter that runs them is filters.Authentication.
package authn
