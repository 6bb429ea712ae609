package authn

import (
	"crypto/x509"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	requestunion "k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
)

// clientCertificate authenticates a request by its verified client
// certificate: user = CN, groups = O (the TLS layer verified it against
// the client CA). Kubernetes' x509 authenticator checks the chain the TLS
// layer verified once more, against that chain's own root, so that it
// records apiserver_client_certificate_expiration_seconds as
// kube-apiserver does for every request with a client certificate.
var clientCertificate = authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return nil, false, nil
	}
	chain := req.TLS.VerifiedChains[0]
	if chain[0].Subject.CommonName == "" {
		return nil, false, nil
	}
	opts := x509.VerifyOptions{Roots: x509.NewCertPool(), Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	opts.Roots.AddCert(chain[len(chain)-1])
	for i := 1; i < len(chain)-1; i++ {
		opts.Intermediates.AddCert(chain[i])
	}
	return x509request.New(opts, commonNameUser).AuthenticateRequest(req)
})

// commonNameUser is the user a verified chain names.
var commonNameUser = x509request.UserConversionFunc(func(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
	leaf := chain[0]
	return &authenticator.Response{User: &user.DefaultInfo{
		Name: leaf.Subject.CommonName, Groups: append([]string{}, leaf.Subject.Organization...),
	}}, true, nil
})

// NewAuthenticator joins the configured ways in: client certificates,
// then bearer tokens (static, service account, bootstrap); any that
// succeeds wins and the user joins system:authenticated.
func NewAuthenticator(tokens ...authenticator.Token) authenticator.Request {
	ways := []authenticator.Request{clientCertificate}
	var present []authenticator.Token
	for _, t := range tokens {
		if t != nil {
			present = append(present, t)
		}
	}
	if len(present) > 0 {
		ways = append(ways, bearertoken.New(tokenunion.New(present...)))
	}
	return group.NewAuthenticatedGroupAdder(requestunion.New(ways...))
}

// NewTokenReviewer authenticates the tokens of TokenReviews with the
// server's token authenticators (not client certificates); nil without
// any.
func NewTokenReviewer(tokens ...authenticator.Token) authenticator.Request {
	var present []authenticator.Token
	for _, t := range tokens {
		if t != nil {
			present = append(present, t)
		}
	}
	if len(present) == 0 {
		return nil
	}
	return group.NewAuthenticatedGroupAdder(bearertoken.New(tokenunion.New(present...)))
}

// APIAudiences are the audiences the API accepts tokens for: the
// service-account issuer, as kube-apiserver defaults --api-audiences
// (DefaultServiceAccountIssuer when issuer is empty).
func APIAudiences(issuer string) authenticator.Audiences {
	if issuer != "" {
		return authenticator.Audiences{issuer}
	}
	return authenticator.Audiences{DefaultServiceAccountIssuer}
}
