package main

import (
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// TestFeatureGates: --feature-gates sets Kubernetes' process-wide gates
// as kube-apiserver's does, and an unknown gate is an error that names
// the flag.
func TestFeatureGates(t *testing.T) {
	gate := features.ConcurrentWatchObjectDecode
	was := utilfeature.DefaultFeatureGate.Enabled(gate)
	t.Cleanup(func() {
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(gate): was}); err != nil {
			t.Error(err)
		}
	})
	f := &apiFlags{featureGates: string(gate) + "=" + map[bool]string{true: "false", false: "true"}[was]}
	if err := f.applyFeatureGates(); err != nil {
		t.Fatal(err)
	}
	if utilfeature.DefaultFeatureGate.Enabled(gate) == was {
		t.Errorf("%s is still %v", gate, was)
	}
	f = &apiFlags{featureGates: "NoSuchGate=true"}
	if err := f.applyFeatureGates(); err == nil || !strings.Contains(err.Error(), "--feature-gates") {
		t.Errorf("unknown gate: %v", err)
	}
}
