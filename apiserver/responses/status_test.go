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
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sqlkube/sqlkube/etcdshim"
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

// TestStatus_StorageSpace: etcd's NOSPACE is answered as kube-apiserver
// answers it (500, no reason, etcd's message), wrapped or not, through
// the in-process client's status error or clientv3's EtcdError; a full
// disk under SQLite is 503 with Retry-After; any other storage error is
// still 500 InternalError.
func TestStatus_StorageSpace(t *testing.T) {
	diskFull := status.Convert(etcdshim.ErrGRPCDiskFull).Message()
	for _, tc := range []struct {
		name       string
		err        error
		code       int
		reason     metav1.StatusReason
		message    string
		retryAfter string
	}{
		{"NOSPACE", rpctypes.ErrNoSpace, 500, metav1.StatusReasonUnknown, "etcdserver: mvcc: database space exceeded", ""},
		{"NOSPACE wrapped", fmt.Errorf("update: %w", rpctypes.ErrNoSpace), 500, metav1.StatusReasonUnknown, "etcdserver: mvcc: database space exceeded", ""},
		{"NOSPACE over gRPC", rpctypes.Error(rpctypes.ErrGRPCNoSpace), 500, metav1.StatusReasonUnknown, "etcdserver: mvcc: database space exceeded", ""},
		{"disk full", etcdshim.ErrGRPCDiskFull, 503, metav1.StatusReasonServiceUnavailable, diskFull, "1"},
		{"disk full over gRPC", status.Error(codes.ResourceExhausted, diskFull), 503, metav1.StatusReasonServiceUnavailable, diskFull, "1"},
		{"another ResourceExhausted", status.Error(codes.ResourceExhausted, "etcdserver: request is too large"), 500, metav1.StatusReasonInternalError, "Internal error occurred: rpc error: code = ResourceExhausted desc = etcdserver: request is too large", ""},
		{"timeout", rpctypes.ErrTimeout, 500, metav1.StatusReasonInternalError, "Internal error occurred: etcdserver: request timed out", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c := echo.New().NewContext(httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", nil), rec)
			if err := Status(c, tc.err); err != nil {
				t.Fatal(err)
			}
			st, _ := c.Get(StatusKey).(metav1.Status)
			if rec.Code != tc.code || st.Code != int32(tc.code) || st.Reason != tc.reason || st.Message != tc.message || rec.Header().Get("Retry-After") != tc.retryAfter {
				t.Errorf("code %d Retry-After %q, Status %+v; want %d %q, reason %q, message %q", rec.Code, rec.Header().Get("Retry-After"), st, tc.code, tc.retryAfter, tc.reason, tc.message)
			}
		})
	}
}
