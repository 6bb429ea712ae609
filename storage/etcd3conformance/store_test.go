package etcd3conformance

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apiserver/pkg/features"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// The store tests below run, in order, the storage.Interface conformance
// tests that k8s.io/apiserver/pkg/storage/etcd3/store_test.go runs, with
// the same arguments.

func TestCreate(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCreate(ctx, t, e.store, e.checkStorageInvariants())
	})
}

func TestCreateWithTTL(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCreateWithTTL(ctx, t, e.store)
	})
}

func TestCreateWithKeyExist(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCreateWithKeyExist(ctx, t, e.store)
	})
}

func TestGet(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGet(ctx, t, e.store)
	})
}

func TestUnconditionalDelete(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestUnconditionalDelete(ctx, t, e.store)
	})
}

func TestConditionalDelete(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestConditionalDelete(ctx, t, e.store)
	})
}

func TestDeleteWithSuggestion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestion(ctx, t, e.store)
	})
}

func TestDeleteWithSuggestionAndConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestionAndConflict(ctx, t, e.store)
	})
}

func TestDeleteWithSuggestionOfDeletedObject(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(ctx, t, e.store)
	})
}

func TestValidateDeletionWithSuggestion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestValidateDeletionWithSuggestion(ctx, t, e.store)
	})
}

func TestValidateDeletionWithOnlySuggestionValid(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(ctx, t, e.store)
	})
}

func TestDeleteWithConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithConflict(ctx, t, e.store)
	})
}

func TestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithConflictAndMissingExpectedTransformOrDecodeError(ctx, t, e.store, e.codec.setFailing)
	})
}

func TestDeleteWithConflictAndExpectedTransformError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, e.store, e.setTransformFailing())
	})
}

func TestDeleteWithConflictAndExpectedDecodeError(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteExpectedTransformOrDecodeError(ctx, t, e.store, e.codec.setFailing)
	})
}

func TestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeFailure(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestDeleteWithSuggestionAndMissingExpectedTransformOrDecodeError(ctx, t, e.store)
	})
}

func TestPreconditionalDeleteWithSuggestion(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestPreconditionalDeleteWithSuggestion(ctx, t, e.store)
	})
}

func TestPreconditionalDeleteWithOnlySuggestionPass(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(ctx, t, e.store)
	})
}

func TestListPaging(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListPaging(ctx, t, e.store)
	})
}

func TestGetListNonRecursive(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGetListNonRecursive(ctx, t, e.increaseRV(), e.store)
	})
}

func TestGetListRecursivePrefix(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGetListRecursivePrefix(ctx, t, e.store)
	})
}

func TestKeySchema(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestKeySchema(ctx, t, e.store)
	})
}

// TestGetListWithErrorAggregation runs on the store built as upstream's
// test builds it: the suite injects read errors that are not corrupt
// objects below where storage.NewStore's store would take them for some.
func TestGetListWithErrorAggregation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGetListWithErrorAggregation(ctx, t, e.store, corruptObjectError(t))
	}, withBareEtcd3(), withUnsafeCorruptObjectDeletion())
}

func TestGetListWithoutErrorAggregation(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, false)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGetListWithoutErrorAggregation(ctx, t, e.store, corruptObjectError(t))
	})
}

func TestGuaranteedUpdate(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdate(ctx, t, e.store, e.checkStorageInvariants())
	})
}

func TestGuaranteedUpdateWithTTL(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateWithTTL(ctx, t, e.store)
	})
}

func TestGuaranteedUpdateChecksStoredData(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateChecksStoredData(ctx, t, e.store)
	})
}

func TestGuaranteedUpdateWithConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateWithConflict(ctx, t, e.store)
	})
}

func TestGuaranteedUpdateWithSuggestionAndConflict(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(ctx, t, e.store)
	})
}

// TestTransformationFailure runs on the store built as upstream's test
// builds it: the test expects a list over a value that cannot be
// transformed to fail as the bare store fails it (an internal error), where
// storage.NewStore's store, as kube-apiserver's, reports a corrupt object.
func TestTransformationFailure(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestTransformationFailure(ctx, t, e.store)
	}, withBareEtcd3())
}

// TestList runs the list tests with and without EtcdRangeStream. With it
// on, the store tries etcd's RangeStream first and, if the server answers
// Unimplemented, marks it unsupported (process-wide) and pages. Upstream
// also checks here that its lists were streamed: TestRangeStream checks
// that the server serves RangeStream.
func TestList(t *testing.T) {
	for _, rangeStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("rangeStream=%v", rangeStream), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, rangeStream)
			resetFeatureSupportChecker(t)
			run(t, func(ctx context.Context, t *testing.T, e *env) {
				storagetesting.RunTestList(ctx, t, e.store, e.compaction(), false, e.recorder)
				if streamReads := e.kv.GetStreamReadsAndReset(); !rangeStream && streamReads > 0 {
					t.Errorf("%d RangeStream requests with the gate off, want none", streamReads)
				}
			})
		})
	}
}

func TestConsistentList(t *testing.T) {
	for _, rangeStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("rangeStream=%v", rangeStream), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.EtcdRangeStream, rangeStream)
			resetFeatureSupportChecker(t)
			run(t, func(ctx context.Context, t *testing.T, e *env) {
				// No watch cache; etcd serves consistent reads; no cache snapshots.
				storagetesting.RunTestConsistentList(ctx, t, e.store, e.increaseRV(), false, true, false)
			})
		})
	}
}

func TestCompactRevision(t *testing.T) {
	// The store learns of compactions made by others by watching
	// compact_rev_key, which ListFromCacheSnapshot turns on.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestCompactRevision(ctx, t, e.store, e.increaseRV(), e.compaction())
	})
}

func TestListContinuation(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		e.learnRangeStreamSupport(ctx, t)
		storagetesting.RunTestListContinuation(ctx, t, e.store, e.checkStorageCallsInvariants())
	})
}

func TestListPaginationRareObject(t *testing.T) {
	// As upstream: ListFromCacheSnapshot adds a Get of compact_rev_key
	// that the call count would see.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, false)
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		e.learnRangeStreamSupport(ctx, t)
		storagetesting.RunTestListPaginationRareObject(ctx, t, e.store, e.checkStorageCallsInvariants())
	})
}

func TestListContinuationWithFilter(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		e.learnRangeStreamSupport(ctx, t)
		storagetesting.RunTestListContinuationWithFilter(ctx, t, e.store, e.checkStorageCallsInvariants())
	})
}

func TestNamespaceScopedList(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestNamespaceScopedList(ctx, t, e.store)
	})
}

func TestListInconsistentContinuation(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListInconsistentContinuation(ctx, t, e.store, e.compaction())
	})
}

func TestListResourceVersionMatch(t *testing.T) {
	run(t, func(ctx context.Context, t *testing.T, e *env) {
		storagetesting.RunTestListResourceVersionMatch(ctx, t, e.store)
	})
}

func TestStats(t *testing.T) {
	for _, sizeBased := range []bool{true, false} {
		t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sizeBased), func(t *testing.T) {
			run(t, func(ctx context.Context, t *testing.T, e *env) {
				if sizeBased {
					if err := e.store.EnableResourceSizeEstimation(e.podKeys); err != nil {
						t.Fatal(err)
					}
				}
				storagetesting.RunTestStats(ctx, t, e.store, e.codec, e.transformer, sizeBased)
			})
		})
	}
}
