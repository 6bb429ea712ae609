package authn

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	requestunion "k8s.io/apiserver/pkg/authentication/request/union"
	tokenunion "k8s.io/apiserver/pkg/authentication/token/union"
	"k8s.io/apiserver/pkg/authentication/user"
)

// clientCertificate authenticates a request by its verified client
// certificate: user = CN, groups = O (the TLS layer verified it against
// the client CA).
var clientCertificate = authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return nil, false, nil
	}
	leaf := req.TLS.VerifiedChains[0][0]
	if leaf.Subject.CommonName == "" {
		return nil, false, nil
	}
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
