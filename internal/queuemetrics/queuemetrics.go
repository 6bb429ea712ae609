// Package queuemetrics lets a process turn client-go's work-queue metrics
// off after a package's init has turned them on.
//
// client-go keeps one process-wide metrics provider for its work queues,
// set once (workqueue.SetProvider); Kubernetes' component-base sets it in
// an init, so every queue of every controller manager in the process
// keeps metrics. A queue with metrics runs a goroutine that wakes twice a
// second to update them; only a queue made while the provider is
// client-go's own no-op starts none. A tenant host runs some forty queues
// per tenant and serves none of their metrics (a tenant's would be mixed
// with every other tenant's), so the wake-ups are all cost: at 100 idle
// tenants, 8,000 a second and the largest share of the host's CPU.
//
// Off puts the no-op back. client-go has no call for that, so this
// package reaches its variable by name (go:linkname): the package's init
// keeps the provider it finds, which is client-go's no-op, since Go
// initialises packages in the order of their import paths once their
// imports are, and this one's sorts before k8s.io/component-base's. The
// test checks both.
package queuemetrics

import (
	"fmt"
	"sync"
	_ "unsafe" // go:linkname

	"k8s.io/client-go/util/workqueue"
)

//go:linkname provider k8s.io/client-go/util/workqueue.globalMetricsProvider
var provider workqueue.MetricsProvider

// noop is client-go's no-op provider, as this package's init found it.
var noop = provider

var once sync.Once

// Off makes work queues created from now on keep no metrics and run no
// goroutine for them, and reports whether it could: false if this
// package's init did not find client-go's no-op (an init that set a
// provider ran first). Call it before the controllers start; queues made
// before keep theirs. It is for the whole process.
func Off() bool {
	if fmt.Sprintf("%T", noop) != "workqueue.noopMetricsProvider" {
		return false
	}
	once.Do(func() { provider = noop })
	return true
}
