package etcd3conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/features"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// The watch tests below run, in order, the conformance tests that
// k8s.io/apiserver/pkg/storage/etcd3/watcher_test.go runs, with the same
// arguments and server settings.

func TestWatch(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatch(ctx, t, e.store)
	})
}

func TestClusterScopedWatch(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestClusterScopedWatch(ctx, t, e.store)
	})
}

func TestNamespaceScopedWatch(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestNamespaceScopedWatch(ctx, t, e.store)
	})
}

func TestDeleteTriggerWatch(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteTriggerWatch(ctx, t, e.store)
	})
}

func TestWatchFromZero(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchFromZero(ctx, t, e.store, e.compaction())
	})
}

func TestWatchFromNonZero(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchFromNonZero(ctx, t, e.store)
	})
}

func TestDelayedWatchDelivery(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDelayedWatchDelivery(ctx, t, e.store)
	})
}

func TestWatchError(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchError(ctx, t, e.store)
	})
}

func TestWatchContextCancel(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchContextCancel(ctx, t, e.store)
	})
}

func TestWatcherTimeout(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatcherTimeout(ctx, t, e.store)
	})
}

func TestWatchDeleteEventObjectHaveLatestRV(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(ctx, t, e.store)
	})
}

func TestWatchInitializationSignal(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchInitializationSignal(ctx, t, e.store)
	})
}

func TestProgressNotify(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunOptionalTestProgressNotify(ctx, t, e.store, e.increaseRV())
	}, withProgressNotifyInterval(time.Second))
}

func TestWatchWithUnsafeDelete(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchWithUnsafeDelete(ctx, t, e.store, corruptObjectError(t))
	})
}

// TestWatchDispatchBookmarkEvents checks that asking the etcd3 store (no
// watch cache) for bookmarks has no effect, even with progress
// notifications every second.
func TestWatchDispatchBookmarkEvents(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchDispatchBookmarkEvents(ctx, t, e.store, false)
	}, withProgressNotifyInterval(time.Second))
}

func TestSendInitialEventsBackwardCompatibility(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunSendInitialEventsBackwardCompatibility(ctx, t, e.store)
	})
}

// The watch-list tests run with and without EtcdRangeStream, as upstream:
// with it on, a watch that starts with the current state may read it with
// RangeStream (sqlkube's server answers Unimplemented: the store pages).

func TestWatchSemantics(t *testing.T) {
	forRangeStream(t, func(t *testing.T) {
		run(t, func(ctx context.Context, t *testing.T, e *env) {
			storagetesting.RunWatchSemantics(ctx, t, e.store)
		}, serially())
	})
}

func TestWatchSemanticsWithConcurrentDecode(t *testing.T) {
	forRangeStream(t, func(t *testing.T) {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ConcurrentWatchObjectDecode, true)
		run(t, func(ctx context.Context, t *testing.T, e *env) {
			storagetesting.RunWatchSemantics(ctx, t, e.store)
		}, serially())
	})
}

func TestWatchSemanticInitialEventsExtended(t *testing.T) {
	forRangeStream(t, func(t *testing.T) {
		run(t, func(ctx context.Context, t *testing.T, e *env) {
			storagetesting.RunWatchSemanticInitialEventsExtended(ctx, t, e.store)
		}, serially())
	})
}

func TestWatchListMatchSingle(t *testing.T) {
	forRangeStream(t, func(t *testing.T) {
		run(t, func(ctx context.Context, t *testing.T, e *env) {
			storagetesting.RunWatchListMatchSingle(ctx, t, e.store)
		}, serially())
	})
}

// forRangeStream runs fn with EtcdRangeStream off and on.
func forRangeStream(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	for _, rangeStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("RangeStream=%v", rangeStream), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, rangeStream)
			fn(t)
		})
	}
}

func TestWatchErrorEventIsBlockingFurtherEvent(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunWatchErrorIsBlockingFurtherEvents(ctx, t, e.store)
	})
}
