package filters

import (
	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Authorization lets a request through only if the authorizer allows its
// verb on its resource or path (403 Forbidden, worded as kube-apiserver
// words it, otherwise). PublicPaths need no authorization.
func Authorization(authz authorizer.Authorizer) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if PublicPaths[req.URL.Path] {
				return next(c)
			}
			info, err := RequestInfoOf(req)
			if err != nil {
				return responses.Status(c, apierrors.NewBadRequest(err.Error()))
			}
			ctx := request.WithRequestInfo(req.Context(), info)
			attrs, err := filters.GetAuthorizerAttributes(ctx)
			if err != nil {
				return responses.Status(c, apierrors.NewInternalError(err))
			}
			decision, reason, err := authz.Authorize(ctx, attrs)
			if decision != authorizer.DecisionAllow {
				if err != nil && reason == "" {
					reason = err.Error()
				}
				return responses.Status(c, responsewriters.ForbiddenStatusError(attrs, reason))
			}
			c.SetRequest(req.WithContext(ctx))
			return next(c)
		}
	}
}
