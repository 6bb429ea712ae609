package admission

import (
	"context"
	"errors"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
)

// fakePlugin admits and validates, failing when told to.
type fakePlugin struct {
	*admission.Handler
	fail bool
}

func (p *fakePlugin) Admit(context.Context, admission.Attributes, admission.ObjectInterfaces) error {
	if p.fail {
		return errors.New("refused")
	}
	return nil
}

func (p *fakePlugin) Validate(context.Context, admission.Attributes, admission.ObjectInterfaces) error {
	return p.Admit(context.Background(), nil, nil)
}

// validateOnly has no admit step.
type validateOnly struct{ *admission.Handler }

func (validateOnly) Validate(context.Context, admission.Attributes, admission.ObjectInterfaces) error {
	return nil
}

func attrs(op admission.Operation) admission.Attributes {
	return admission.NewAttributesRecord(nil, nil, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "ns", "p",
		schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "", op, nil, false, nil)
}

// samples are the observations of family's series with exactly labels.
func samples(t *testing.T, family string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			if mf.GetType() == dto.MetricType_SUMMARY {
				return m.GetSummary().GetSampleCount()
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// TestControllerMetrics: each plugin's steps land on their own series,
// kept or not, rejected apart, as Kubernetes' decorator labels them.
func TestControllerMetrics(t *testing.T) {
	const family = "apiserver_admission_controller_admission_duration_seconds"
	ok := withControllerMetrics(&fakePlugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, "TestOK")
	bad := withControllerMetrics(&fakePlugin{Handler: admission.NewHandler(admission.Create), fail: true}, "TestBad")
	vonly := withControllerMetrics(validateOnly{admission.NewHandler(admission.Create)}, "TestValidateOnly")
	ctx := context.Background()
	for range 3 {
		if err := ok.(admission.MutationInterface).Admit(ctx, attrs(admission.Create), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ok.(admission.ValidationInterface).Validate(ctx, attrs(admission.Update), nil); err != nil {
		t.Fatal(err)
	}
	// An operation no series is kept for is observed too.
	if err := ok.(admission.ValidationInterface).Validate(ctx, attrs("WATCH"), nil); err != nil {
		t.Fatal(err)
	}
	if err := bad.(admission.MutationInterface).Admit(ctx, attrs(admission.Create), nil); err == nil {
		t.Fatal("the failing plugin admitted")
	}
	if err := vonly.(admission.MutationInterface).Admit(ctx, attrs(admission.Create), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, step, op, rejected string
		want                     uint64
	}{
		{"TestOK", "admit", "CREATE", "false", 3},
		{"TestOK", "validate", "UPDATE", "false", 1},
		{"TestOK", "validate", "WATCH", "false", 1},
		{"TestOK", "admit", "UPDATE", "false", 0},
		{"TestBad", "admit", "CREATE", "true", 1},
		{"TestBad", "admit", "CREATE", "false", 0},
		{"TestValidateOnly", "admit", "CREATE", "false", 0}, // it has no admit step
	} {
		got := samples(t, family, map[string]string{"name": c.name, "type": c.step, "operation": c.op, "rejected": c.rejected})
		if got != c.want {
			t.Errorf("%s %s %s rejected=%s: %d observations, want %d", c.name, c.step, c.op, c.rejected, got, c.want)
		}
	}
	if !ok.Handles(admission.Update) || ok.Handles(admission.Delete) {
		t.Error("the decorated plugin does not handle what the plugin handles")
	}
}

// TestStepMetrics: the chain's steps go to the histogram and its summary.
func TestStepMetrics(t *testing.T) {
	chain := withStepMetrics(&fakePlugin{Handler: admission.NewHandler(admission.Delete)})
	if err := chain.(admission.ValidationInterface).Validate(context.Background(), attrs(admission.Delete), nil); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"type": "validate", "operation": "DELETE", "rejected": "false"}
	for _, family := range []string{"apiserver_admission_step_admission_duration_seconds", "apiserver_admission_step_admission_duration_seconds_summary"} {
		if got := samples(t, family, labels); got != 1 {
			t.Errorf("%s: %d observations, want 1", family, got)
		}
	}
}
