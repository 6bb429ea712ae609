package cacherconformance

import (
	"context"
	"testing"

	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// The watch tests below run, in order, the conformance tests that
// k8s.io/apiserver/pkg/storage/cacher/cacher_test.go runs, with the same
// arguments. WatchError and WatchContextCancel are left empty there and
// left out here. Each runs twice: on the watch cache's own watchers, and on
// sqlkube's fan-out ring in front of it (what storage.NewCached serves).

// runWatch runs fn on a fresh env of each kind.
func runWatch(t *testing.T, fn func(ctx context.Context, t *testing.T, e *env), opts ...setupOption) {
	t.Helper()
	t.Run("cacher", func(t *testing.T) { run(t, fn, opts...) })
	t.Run("fanout", func(t *testing.T) {
		run(t, fn, append(opts, func(o *setupOptions) { o.fanout = true })...)
	})
}

func TestWatch(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatch(ctx, t, e.cacher)
	})
}

func TestWatchFromZero(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchFromZero(ctx, t, e.cacher, e.compactWatch())
	})
}

func TestDeleteTriggerWatch(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteTriggerWatch(ctx, t, e.cacher)
	})
}

func TestWatchFromNonZero(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchFromNonZero(ctx, t, e.cacher)
	})
}

func TestDelayedWatchDelivery(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDelayedWatchDelivery(ctx, t, e.cacher)
	})
}

func TestWatcherTimeout(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatcherTimeout(ctx, t, e.cacher)
	})
}

func TestWatchDeleteEventObjectHaveLatestRV(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(ctx, t, e.cacher)
	})
}

func TestWatchInitializationSignal(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchInitializationSignal(ctx, t, e.cacher)
	})
}

func TestClusterScopedWatch(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestClusterScopedWatch(ctx, t, e.cacher)
	}, withClusterScopedKeyFunc, withNodeNameAndNamespaceIndex)
}

func TestNamespaceScopedWatch(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestNamespaceScopedWatch(ctx, t, e.cacher)
	}, withNodeNameAndNamespaceIndex)
}

// TestWatchDispatchBookmarkEvents checks that the cacher, unlike the bare
// etcd3 store, sends the bookmarks asked for.
func TestWatchDispatchBookmarkEvents(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestWatchDispatchBookmarkEvents(ctx, t, e.cacher, true)
	})
}

func TestWatchBookmarksWithCorrectResourceVersion(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestOptionalWatchBookmarksWithCorrectResourceVersion(ctx, t, e.cacher)
	})
}

func TestSendInitialEventsBackwardCompatibility(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunSendInitialEventsBackwardCompatibility(ctx, t, e.cacher)
	})
}

func TestWatchSemantics(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunWatchSemantics(ctx, t, e.withCreateWrapper(t))
	})
}

func TestWatchSemanticInitialEventsExtended(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunWatchSemanticInitialEventsExtended(ctx, t, e.withCreateWrapper(t))
	})
}

func TestWatchListMatchSingle(t *testing.T) {
	runWatch(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunWatchListMatchSingle(ctx, t, e.withCreateWrapper(t))
	})
}
