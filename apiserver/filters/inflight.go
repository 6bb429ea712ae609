package filters

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Defaults of kube-apiserver's --max-requests-inflight and
// --max-mutating-requests-inflight.
const (
	DefaultMaxRequestsInflight         = 400
	DefaultMaxMutatingRequestsInflight = 200
)

// LongRunningSubresources are served for as long as the client stays, so
// they hold no in-flight slot (as kube-apiserver's
// --long-running-request-regexp default).
var LongRunningSubresources = sets.New("attach", "exec", "proxy", "log", "portforward")

// readOnlyVerbs share the read-only budget; every other verb is mutating.
var readOnlyVerbs = sets.New("get", "list", "watch")

// InflightLimiter bounds the requests served at once, read-only and
// mutating apart, like kube-apiserver's max-in-flight filter: a request
// over its budget is answered at once with 429 TooManyRequests and
// Retry-After: 1. Watches and the long-running subresources are not
// counted, nor are health probes (PublicPaths) and requests of
// system:masters (the admin, and the loopback identity of the server's
// own controllers), which are never limited. A budget of 0 or less means
// no limit.
//
// Fairness: one user (by name; all unauthenticated callers are one) may
// hold at most half of a budget (at least one slot), so a single busy
// client cannot lock the others out.
type InflightLimiter struct {
	readOnly, mutating chan struct{} // nil: unlimited
	mu                 sync.Mutex    // guards held
	held               map[heldKey]int
	// readOnlyPeak and mutatingPeak are the most slots held at once since
	// the last PublishMetrics tick.
	readOnlyPeak, mutatingPeak atomic.Int64
}

// heldKey counts one user's slots of one budget.
type heldKey struct {
	user     string
	mutating bool
}

// NewInflightLimiter limits read-only and mutating requests to these
// budgets.
func NewInflightLimiter(readOnly, mutating int) *InflightLimiter {
	l := &InflightLimiter{held: map[heldKey]int{}}
	if readOnly > 0 {
		l.readOnly = make(chan struct{}, readOnly)
	}
	if mutating > 0 {
		l.mutating = make(chan struct{}, mutating)
	}
	return l
}

// Middleware runs after Authentication (the user is in the context).
func (l *InflightLimiter) Middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if l.readOnly == nil && l.mutating == nil {
			return next(c)
		}
		req := c.Request()
		if PublicPaths[req.URL.Path] {
			return next(c) // health probes answer under load too
		}
		if u, ok := request.UserFrom(req.Context()); ok && exemptFromLimits(u) {
			return next(c)
		}
		info, err := RequestInfoOf(req)
		if err != nil {
			return next(c) // the handler answers 400
		}
		if info.Verb == "watch" || (info.IsResourceRequest && LongRunningSubresources.Has(info.Subresource)) {
			return next(c)
		}
		slots := l.mutating
		if !info.IsResourceRequest || readOnlyVerbs.Has(info.Verb) {
			slots = l.readOnly // non-resource requests are reads: GET /api, /openapi...
		}
		if slots == nil {
			return next(c)
		}
		key := heldKey{mutating: slots == l.mutating}
		if u, ok := request.UserFrom(req.Context()); ok {
			key.user = u.GetName()
		}
		if !l.take(slots, key) {
			c.Response().Header().Set("Retry-After", "1")
			return responses.Status(c, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1))
		}
		defer l.release(slots, key)
		return next(c)
	}
}

// take claims a slot of slots for key's user unless the budget or the
// user's share of it is spent.
func (l *InflightLimiter) take(slots chan struct{}, key heldKey) bool {
	share := max(1, cap(slots)/2)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key] >= share {
		return false
	}
	select {
	case slots <- struct{}{}:
		l.held[key]++
		peak := &l.readOnlyPeak
		if key.mutating {
			peak = &l.mutatingPeak
		}
		for n := int64(len(slots)); ; {
			if p := peak.Load(); p >= n || peak.CompareAndSwap(p, n) {
				break
			}
		}
		return true
	default:
		return false
	}
}

func (l *InflightLimiter) release(slots chan struct{}, key heldKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	<-slots
	if l.held[key]--; l.held[key] == 0 {
		delete(l.held, key)
	}
}

// exemptFromLimits: system:masters and the API server's own identity.
func exemptFromLimits(u user.Info) bool {
	return u.GetName() == user.APIServerUser || slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// PublishMetrics sets apiserver_current_inflight_requests{request_kind=
// "readOnly"|"mutating"} every second, until stop closes, to the most
// slots held at once in that second, as kube-apiserver's max-in-flight
// filter does (requests exempt from the limits are not counted). Without
// any budget nothing is published, as kube-apiserver installs no filter
// then.
func (l *InflightLimiter) PublishMetrics(stop <-chan struct{}) {
	if l.readOnly == nil && l.mutating == nil {
		return
	}
	metrics.Register()
	l.publishPeaks()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				l.publishPeaks()
			}
		}
	}()
}

// publishPeaks publishes the peaks since the last call, and starts the
// next period's from the slots held now.
func (l *InflightLimiter) publishPeaks() {
	metrics.UpdateInflightRequestMetrics(metrics.ExecutingPhase,
		int(l.readOnlyPeak.Swap(int64(len(l.readOnly)))), int(l.mutatingPeak.Swap(int64(len(l.mutating)))))
}
