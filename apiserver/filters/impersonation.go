package filters

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfeatures "k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// impersonatedUserKey is where impersonate leaves the user a request acts
// as (user.Info) in the echo context, for the audit log.
const impersonatedUserKey = "sqlkube.impersonatedUser"

// Impersonation lets a caller act as another user with the Impersonate-User,
// -Group, -Uid and -Extra-* headers, through Kubernetes' own filter
// (impersonation.WithConstrainedImpersonation while the
// ConstrainedImpersonation gate is on, as it is by default since 1.36,
// which first asks for the narrower impersonate-on verbs and falls back to
// the impersonate verb; impersonation.WithImpersonation otherwise): the
// authorizer must allow the caller the
// impersonate verb on each users, groups, serviceaccounts, uids and
// userextras/KEY asked for (403 Forbidden otherwise); the request then
// runs as the impersonated user, who joins system:authenticated
// (system:unauthenticated for system:anonymous) unless groups given say
// otherwise, and a service account joins its groups when no group is
// given. It runs after authentication and the audit log (which records
// both users) and before the in-flight limits and authorization, as in
// kube-apiserver.
//
// Headers the filter cannot use (a group, uid or extra without a user)
// are 400 Bad Request here, where kube-apiserver answers 500.
func Impersonation(authz authorizer.Authorizer) echo.MiddlewareFunc {
	impersonate := func(h http.Handler) http.Handler {
		return impersonation.WithImpersonation(h, authz, scheme.Codecs)
	}
	if utilfeature.DefaultFeatureGate.Enabled(genericfeatures.ConstrainedImpersonation) {
		impersonate = func(h http.Handler) http.Handler {
			return impersonation.WithConstrainedImpersonation(h, authz, scheme.Codecs)
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			asked, err := impersonationAsked(req.Header)
			if err != nil {
				return responses.Status(c, apierrors.NewBadRequest(err.Error()))
			}
			if !asked {
				return next(c)
			}
			caller, _ := request.UserFrom(req.Context())
			var nextErr error
			inner := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				if u, ok := request.UserFrom(r.Context()); ok && u != caller {
					c.Set(impersonatedUserKey, u)
				}
				c.SetRequest(r)
				nextErr = next(c)
			})
			impersonate(inner).ServeHTTP(c.Response(), req)
			return nextErr
		}
	}
}

// impersonationAsked reports whether headers ask to impersonate, and an
// error for a group, uid or extra asked for without a user.
func impersonationAsked(h http.Header) (bool, error) {
	var others []string
	if len(h.Values(authenticationv1.ImpersonateGroupHeader)) > 0 {
		others = append(others, authenticationv1.ImpersonateGroupHeader)
	}
	if len(h.Values(authenticationv1.ImpersonateUIDHeader)) > 0 {
		others = append(others, authenticationv1.ImpersonateUIDHeader)
	}
	for name := range h {
		if strings.HasPrefix(name, authenticationv1.ImpersonateUserExtraHeaderPrefix) {
			others = append(others, name)
		}
	}
	hasUser := h.Get(authenticationv1.ImpersonateUserHeader) != ""
	if !hasUser && len(others) > 0 {
		return false, fmt.Errorf("requested %s without impersonating a user", strings.Join(others, ", "))
	}
	return hasUser, nil
}

// ImpersonatedUser is the user a request acts as through impersonation,
// or nil.
func ImpersonatedUser(c echo.Context) user.Info {
	u, _ := c.Get(impersonatedUserKey).(user.Info)
	return u
}
