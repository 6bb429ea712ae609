package responses

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestStatus_ClientClosed: a handler that failed because its client went
// away answers 499, not 500; a cancellation the client did not cause
// stays a server error.
func TestStatus_ClientClosed(t *testing.T) {
	for _, tc := range []struct {
		name         string
		clientGone   bool
		err          error
		code         int
		messageStart string
	}{
		{"client gone", true, fmt.Errorf("listing: %w", context.Canceled), StatusClientClosedRequest, "the client closed the request"},
		{"client gone, other error", true, errors.New("disk I/O error"), http.StatusInternalServerError, "Internal error occurred"},
		{"client still there", false, context.Canceled, http.StatusInternalServerError, "Internal error occurred"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.clientGone {
				cancel()
			}
			rec := httptest.NewRecorder()
			c := echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil).WithContext(ctx), rec)
			if err := Status(c, tc.err); err != nil {
				t.Fatal(err)
			}
			st, ok := c.Get(StatusKey).(metav1.Status)
			if rec.Code != tc.code || !ok || int(st.Code) != tc.code || !strings.HasPrefix(st.Message, tc.messageStart) {
				t.Errorf("code %d, status %+v; want %d %q…", rec.Code, st, tc.code, tc.messageStart)
			}
		})
	}
}
