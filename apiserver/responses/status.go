package responses

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	grpcstatus "google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/storage"
)

// Status answers with err as a metav1.Status of its code: 499 for a
// request its client closed, the answers of storageStatus to the
// datastore's refusals for lack of space, 500 for any other error that is
// not an API status.
func Status(c echo.Context, err error) error {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
	case storage.IsNoSpace(err), storage.IsDiskFull(err):
		status = storageStatus(err)
	case clientClosed(c, err):
		status = &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: StatusClientClosedRequest,
			Message: "the client closed the request before the server answered: " + err.Error(),
		}}
	default:
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	s.Kind, s.APIVersion = "Status", "v1"
	if s.Code == 0 {
		s.Code = http.StatusInternalServerError
	}
	// As kube-apiserver does: a Status that says when to retry (a watch
	// cache still initializing answers 429 with one) says it in the
	// header too, where client-go looks, and retries.
	if d := s.Details; d != nil && d.RetryAfterSeconds > 0 && (s.Code == http.StatusTooManyRequests || s.Code >= http.StatusInternalServerError) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(d.RetryAfterSeconds)))
	}
	c.Set(StatusKey, s) // for the audit log
	return Object(c, int(s.Code), &s, schema.GroupVersion{Version: "v1"})
}

// storageStatus answers the datastore's refusals of a write for lack of
// space:
//
//   - etcd's NOSPACE ("etcdserver: mvcc: database space exceeded", the
//     quota's) as kube-apiserver answers it: the etcd3 store and the
//     registry's error interpretation pass it through unchanged, and
//     responsewriters.ErrorToAPIStatus answers an error that is not an API
//     status with 500, no reason (StatusReasonUnknown) and the error's text
//     as the message, so a client sees what it sees over etcd;
//   - a full disk under a SQLite datastore (no kube-apiserver answer: etcd
//     stops on a full disk) as 503 ServiceUnavailable with Retry-After: 1.
//     The condition is transient and clears without anyone's help, and
//     client-go retries a 503 with Retry-After by itself (up to 10 times,
//     any verb), so a short one costs clients a delay instead of an
//     error; a long one fails each request after its retries with a
//     message that says what happened.
func storageStatus(err error) apierrors.APIStatus {
	if storage.IsNoSpace(err) {
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Reason: metav1.StatusReasonUnknown, Message: rpctypes.ErrNoSpace.Error(),
		}}
	}
	st := apierrors.NewServiceUnavailable(grpcstatus.Convert(etcdshim.ErrGRPCDiskFull).Message())
	st.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return st
}

// StatusClientClosedRequest is the code a request gets when its client
// went away (closed the connection or reset the stream) and the handler
// failed for that reason alone: no one reads the answer, and the audit
// log must not count it as the server's failure.
// kube-apiserver records these as 500 "context canceled"
// (kubernetes/kubernetes#139256); 499 is the code proxies use for it.
const StatusClientClosedRequest = 499

// clientClosed says whether err is only the cancellation of the
// request's own context, which net/http does when the client goes away.
func clientClosed(c echo.Context, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(c.Request().Context().Err(), context.Canceled)
}

// httpError renders echo's own errors (no route, bad method) as Statuses.
func EchoError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		st := &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: int32(he.Code), Reason: reasonForCode(he.Code),
			Message: http.StatusText(he.Code),
		}}
		_ = Status(c, st)
		return
	}
	_ = Status(c, err)
}

func reasonForCode(code int) metav1.StatusReason {
	switch code {
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusMethodNotAllowed:
		return metav1.StatusReasonMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	}
	return metav1.StatusReasonUnknown
}

// Keys of what handlers leave in the echo context for the audit log: the
// Status of a failed request, and the name of a created object (not in
// the URL).
const (
	StatusKey      = "sqlkube.status"
	CreatedNameKey = "sqlkube.createdName"
)
