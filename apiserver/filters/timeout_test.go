package filters

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// TestWithRequestTimeout: a request that is not long-running gets a
// deadline (its ?timeout= when shorter than the default); a watch gets
// none.
func TestWithRequestTimeout(t *testing.T) {
	e := echo.New()
	e.Use(RequestInfo, Timeout)
	deadlines := make(chan time.Duration, 1)
	e.Any("/*", func(c echo.Context) error {
		d, ok := c.Request().Context().Deadline()
		if !ok {
			deadlines <- -1
		} else {
			deadlines <- time.Until(d)
		}
		return c.NoContent(http.StatusOK)
	})
	for _, tc := range []struct {
		path     string
		min, max time.Duration // -1: no deadline
	}{
		{"/api/v1/namespaces/default/configmaps", DefaultRequestTimeout - 5*time.Second, DefaultRequestTimeout},
		{"/api/v1/namespaces/default/configmaps?timeout=2s", time.Second, 2 * time.Second},
		{"/api/v1/namespaces/default/configmaps?timeout=5m", DefaultRequestTimeout - 5*time.Second, DefaultRequestTimeout},
		{"/api/v1/namespaces/default/configmaps?watch=true", -1, -1},
		{"/api/v1/namespaces/default/pods/p/log", -1, -1},
	} {
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, tc.path, nil)
		e.ServeHTTP(httptest.NewRecorder(), req)
		got := <-deadlines
		if tc.min == -1 {
			if got != -1 {
				t.Errorf("%s: deadline in %v, want none", tc.path, got)
			}
			continue
		}
		if got < tc.min || got > tc.max {
			t.Errorf("%s: deadline in %v, want between %v and %v", tc.path, got, tc.min, tc.max)
		}
	}
}
