package queuemetrics_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/sqlkube/sqlkube/internal/queuemetrics"
	_ "k8s.io/component-base/metrics/prometheus/workqueue" // sets the provider in its init, as kube-controller-manager's code does
)

// metricsLoops counts the goroutines that update work queues' metrics.
func metricsLoops() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "workqueue.(*Typed[...]).updateUnfinishedWorkLoop")
}

// TestOff: component-base's init set a provider, and this package's init
// still found client-go's no-op; queues made after Off start no metrics
// goroutine, and those made before do.
func TestOff(t *testing.T) {
	noop, provider := queuemetrics.Providers()
	if got := fmt.Sprintf("%T", noop); got != "workqueue.noopMetricsProvider" {
		t.Fatalf("this package's init found provider %s, want client-go's no-op: component-base's init ran first", got)
	}
	if provider == noop {
		t.Fatal("component-base's init set no provider: nothing to turn off")
	}
	before := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "before"})
	defer before.ShutDown()
	base := metricsLoops()
	if base == 0 {
		t.Fatal("a queue made with component-base's provider runs no metrics goroutine")
	}
	if !queuemetrics.Off() {
		t.Fatal("Off: not turned off")
	}
	var after []workqueue.TypedRateLimitingInterface[string]
	for i := range 3 {
		q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: fmt.Sprint("after-", i)})
		defer q.ShutDown()
		after = append(after, q)
	}
	if n := metricsLoops(); n != base {
		t.Fatalf("%d metrics goroutines after Off and 3 named queues, want the %d from before", n, base)
	}
}
