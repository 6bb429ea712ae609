package filters

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// requestInfos parses request paths into RequestInfos.
var requestInfos = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// RequestInfo parses what a request asks for (verb, resource,
// namespace, name...) once, first in the chain as kube-apiserver does;
// authentication, audit, limits, authorization and the handlers read it
// from the context (400 if the path cannot be parsed).
func RequestInfo(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		info, err := requestInfos.NewRequestInfo(req)
		if err != nil {
			return responses.Status(c, apierrors.NewBadRequest(err.Error()))
		}
		c.SetRequest(req.WithContext(request.WithRequestInfo(req.Context(), info)))
		return next(c)
	}
}

// RequestInfoOf is the request's RequestInfo: RequestInfo's, or
// parsed here for a request that did not pass it.
func RequestInfoOf(req *http.Request) (*request.RequestInfo, error) {
	if info, ok := request.RequestInfoFrom(req.Context()); ok {
		return info, nil
	}
	return requestInfos.NewRequestInfo(req)
}
