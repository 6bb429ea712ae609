package apiserver

import (
	"slices"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Defaults of kube-apiserver's --max-requests-inflight and
// --max-mutating-requests-inflight.
const (
	DefaultMaxRequestsInflight         = 400
	DefaultMaxMutatingRequestsInflight = 200
)

// longRunningSubresources are served for as long as the client stays, so
// they hold no in-flight slot (as kube-apiserver's
// --long-running-request-regexp default).
var longRunningSubresources = sets.New("attach", "exec", "proxy", "log", "portforward")

// readOnlyVerbs share the read-only budget; every other verb is mutating.
var readOnlyVerbs = sets.New("get", "list", "watch")

// inflightLimiter bounds the requests served at once, read-only and
// mutating apart, like kube-apiserver's max-in-flight filter: a request
// over its budget is answered at once with 429 TooManyRequests and
// Retry-After: 1. Watches and the long-running subresources are not
// counted, nor are health probes (publicPaths) and requests of system:masters (the admin, and the
// loopback identity of the server's own controllers), which are never
// limited. A budget of 0 or less means no limit.
type inflightLimiter struct {
	readOnly, mutating chan struct{} // nil: unlimited
}

func newInflightLimiter(readOnly, mutating int) *inflightLimiter {
	l := &inflightLimiter{}
	if readOnly > 0 {
		l.readOnly = make(chan struct{}, readOnly)
	}
	if mutating > 0 {
		l.mutating = make(chan struct{}, mutating)
	}
	return l
}

// middleware runs after authentication (the user is in the context).
func (l *inflightLimiter) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if l.readOnly == nil && l.mutating == nil {
			return next(c)
		}
		req := c.Request()
		if publicPaths[req.URL.Path] {
			return next(c) // health probes answer under load too
		}
		if u, ok := request.UserFrom(req.Context()); ok && exemptFromLimits(u) {
			return next(c)
		}
		info, err := requestInfos.NewRequestInfo(req)
		if err != nil {
			return next(c) // the handler answers 400
		}
		if info.Verb == "watch" || (info.IsResourceRequest && longRunningSubresources.Has(info.Subresource)) {
			return next(c)
		}
		slots := l.mutating
		if !info.IsResourceRequest || readOnlyVerbs.Has(info.Verb) {
			slots = l.readOnly // non-resource requests are reads: GET /api, /openapi...
		}
		if slots == nil {
			return next(c)
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			return next(c)
		default:
			c.Response().Header().Set("Retry-After", "1")
			return writeStatus(c, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1))
		}
	}
}

// exemptFromLimits: system:masters and the API server's own identity.
func exemptFromLimits(u user.Info) bool {
	return u.GetName() == user.APIServerUser || slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}
