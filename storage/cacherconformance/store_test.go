package cacherconformance

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage/etcd3"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// The store tests below run, in order, the storage.Interface conformance
// tests that k8s.io/apiserver/pkg/storage/cacher/cacher_test.go runs, with
// the same arguments and feature gates. The tests upstream leaves empty
// there (ListInconsistentContinuation, ListResourceVersionMatch,
// GuaranteedUpdate, GuaranteedUpdateChecksStoredData, TransformationFailure)
// are left out, and so is TestMarkConsistent, which inspects the cache's
// internals rather than running a conformance test.

// run runs fn on a fresh env. Like upstream, the tests get a background
// context.
func run(t *testing.T, fn func(ctx context.Context, t *testing.T, e *env), opts ...setupOption) {
	t.Helper()
	fn(context.Background(), t, newEnv(t, opts...))
}

// Writes pass through the cacher to the store; there is nothing of the
// store's to check (as upstream).
func noStorageInvariants(context.Context, *testing.T, string) {}

// Paged lists pass through to the store; their calls are not counted (as
// upstream).
func noStorageCallsInvariants(*testing.T, uint64, uint64) {}

func TestCreate(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCreate(ctx, t, e.cacher, noStorageInvariants)
	})
}

func TestCreateWithTTL(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCreateWithTTL(ctx, t, e.cacher)
	})
}

func TestCreateWithKeyExist(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCreateWithKeyExist(ctx, t, e.cacher)
	})
}

func TestGet(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGet(ctx, t, e.cacher)
	})
}

func TestUnconditionalDelete(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestUnconditionalDelete(ctx, t, e.cacher)
	})
}

func TestConditionalDelete(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestConditionalDelete(ctx, t, e.cacher)
	})
}

func TestDeleteWithSuggestion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestion(ctx, t, e.cacher)
	})
}

func TestDeleteWithSuggestionAndConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestionAndConflict(ctx, t, e.cacher)
	})
}

func TestDeleteWithSuggestionOfDeletedObject(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(ctx, t, e.cacher)
	})
}

func TestValidateDeletionWithSuggestion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestValidateDeletionWithSuggestion(ctx, t, e.cacher)
	})
}

func TestValidateDeletionWithOnlySuggestionValid(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(ctx, t, e.cacher)
	})
}

func TestDeleteWithConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithConflict(ctx, t, e.cacher)
	})
}

func TestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	transformer := &failingTransformer{Transformer: identity.NewEncryptCheckTransformer()}
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(ctx, t, e.cacher, transformer.setFailing)
	}, withTransformer(transformer))
}

func TestDeleteWithConflictAndExpectedTransformError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	transformer := &failingTransformer{Transformer: identity.NewEncryptCheckTransformer()}
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, e.cacher, transformer.setFailing)
	}, withTransformer(transformer))
}

func TestDeleteWithConflictAndExpectedDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	// The object the test cannot decode is deleted, and the store's watch
	// sees it go: let its decode error through instead of panicking, as
	// upstream.
	etcd3.TestOnlySetFatalOnDecodeError(t, false)
	codec := &failingCodec{Codec: protoCodec}
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, e.cacher, codec.setFailing)
	}, withCodec(codec))
}

func TestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeError(ctx, t, e.cacher)
	})
}

func TestPreconditionalDeleteWithSuggestion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestPreconditionalDeleteWithSuggestion(ctx, t, e.cacher)
	})
}

func TestPreconditionalDeleteWithSuggestionPass(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(ctx, t, e.cacher)
	})
}

func TestListPaging(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListPaging(ctx, t, e.cacher)
	})
}

// TestLists runs the list tests with and without cache snapshots.
// Consistent lists are always served from the cache (ConsistentListFromCache
// is GA).
func TestLists(t *testing.T) {
	for _, listFromCacheSnapshot := range []bool{true, false} {
		t.Run(fmt.Sprintf("ListFromCacheSnapshot=%v", listFromCacheSnapshot), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, listFromCacheSnapshot)
			// The list recorder sees the store's paged lists only: with
			// EtcdRangeStream on, which sqlkube's etcd API serves, what the
			// cache delegates is streamed and it records nothing.
			// etcd3conformance runs the lists both ways.
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, false)
			t.Run("List", func(t *testing.T) {
				t.Parallel()
				run(t, func(ctx context.Context, t *testing.T, e *env) {
					storagetesting.RunTestList(ctx, t, e.cacher, e.compactStore(), true, e.recorder)
				})
			})
			t.Run("ConsistentList", func(t *testing.T) {
				t.Parallel()
				run(t, func(ctx context.Context, t *testing.T, e *env) {
					storagetesting.RunTestConsistentList(ctx, t, e.cacher, e.increaseRV(), true, true, listFromCacheSnapshot)
				})
			})
			t.Run("GetListNonRecursive", func(t *testing.T) {
				t.Parallel()
				run(t, func(ctx context.Context, t *testing.T, e *env) {
					storagetesting.RunTestGetListNonRecursive(ctx, t, e.increaseRV(), e.cacher)
				})
			})
		})
	}
}

func TestCompactRevision(t *testing.T) {
	// The store learns of compactions made by others by watching
	// compact_rev_key, which ListFromCacheSnapshot turns on.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCompactRevision(ctx, t, e.cacher, e.increaseRV(), e.compactStore())
	})
}

func TestGetListRecursivePrefix(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGetListRecursivePrefix(ctx, t, e.cacher)
	})
}

func TestListContinuation(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListContinuation(ctx, t, e.cacher, noStorageCallsInvariants)
	})
}

func TestListPaginationRareObject(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListPaginationRareObject(ctx, t, e.cacher, noStorageCallsInvariants)
	})
}

func TestListContinuationWithFilter(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListContinuationWithFilter(ctx, t, e.cacher, noStorageCallsInvariants)
	})
}

func TestNamespaceScopedList(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestNamespaceScopedList(ctx, t, e.cacher)
	}, withNodeNameAndNamespaceIndex)
}

func TestGuaranteedUpdateWithTTL(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateWithTTL(ctx, t, e.cacher)
	})
}

func TestGuaranteedUpdateWithConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateWithConflict(ctx, t, e.cacher)
	})
}

func TestGuaranteedUpdateWithSuggestionAndConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(ctx, t, e.cacher)
	})
}

func TestStats(t *testing.T) {
	for _, sizeBased := range []bool{true, false} {
		t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sizeBased), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.SizeBasedListCostEstimate, sizeBased)
			run(t, func(ctx context.Context, t *testing.T, e *env) {
				storagetesting.RunTestStats(ctx, t, e.cacher, protoCodec, identity.NewEncryptCheckTransformer(), sizeBased)
			})
		})
	}
}

func TestKeySchema(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestKeySchema(ctx, t, e.cacher)
	})
}
