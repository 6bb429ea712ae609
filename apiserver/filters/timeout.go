package filters

import (
	"context"
	"time"

	"github.com/labstack/echo/v4"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// DefaultRequestTimeout bounds every request that is not long-running
// (watches, exec/attach/portforward/proxy/log and upgrades are not), as
// kube-apiserver's --request-timeout: storage calls end with the
// request's context, so a database that stops answering fails a request
// instead of holding it.
const DefaultRequestTimeout = time.Minute

// Timeout gives a request that is not long-running a deadline:
// DefaultRequestTimeout, or the request's ?timeout= when shorter.
func Timeout(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		info, _ := request.RequestInfoFrom(req.Context())
		if httpstream.IsUpgradeRequest(req) || info == nil || info.Verb == "watch" || LongRunningSubresources.Has(info.Subresource) {
			return next(c)
		}
		d := DefaultRequestTimeout
		if v := req.URL.Query().Get("timeout"); v != "" {
			if t, err := time.ParseDuration(v); err == nil && t > 0 && t < d {
				d = t
			}
		}
		ctx, cancel := context.WithTimeout(req.Context(), d)
		defer cancel()
		c.SetRequest(req.WithContext(ctx))
		return next(c)
	}
}
