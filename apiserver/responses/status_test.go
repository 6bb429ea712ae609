package responses

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestWriteStatus_RetryAfter: a Status that says when to retry (a watch
// cache still initializing) carries Retry-After, which client-go obeys;
// others do not.
func TestWriteStatus_RetryAfter(t *testing.T) {
	for _, tc := range []struct {
		err        error
		code       int
		retryAfter string
	}{
		{apierrors.NewTooManyRequests("storage is (re)initializing", 1), http.StatusTooManyRequests, "1"},
		{apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "list", 3), http.StatusInternalServerError, "3"},
		{apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "x"), http.StatusNotFound, ""},
	} {
		rec := httptest.NewRecorder()
		c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil), rec)
		if err := Status(c, tc.err); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tc.code || rec.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%v: code %d Retry-After %q, want %d %q", tc.err, rec.Code, rec.Header().Get("Retry-After"), tc.code, tc.retryAfter)
		}
	}
}
