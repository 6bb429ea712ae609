package admission

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/component-base/metrics"
)

// The admission chain's latencies, under kube-apiserver's names, labels
// and buckets (k8s.io/apiserver/pkg/admission/metrics):
// apiserver_admission_step_admission_duration_seconds (with its
// _summary) for each step of the whole chain, admit then validate, and
// apiserver_admission_controller_admission_duration_seconds for each
// plugin and step.
//
// Kubernetes' package records them too, but with a label-hashed lookup of
// the series (and two allocations) per observation: about 300 ns, 23 of
// them per pod create, together about 3 % of the API server's CPU per
// create. Here each plugin keeps the series it has observed, so that an
// observation is a bucket search and three atomic adds (about 35 ns).
// The families are ours, registered in Registry, not in
// legacyregistry, where Kubernetes' package has registered its own under
// the same names: those are never observed (this chain does not use that
// package's decorators), so they never appear; the API server's /metrics
// serves Registry's instead (Owns). The webhook plugins still
// record apiserver_admission_webhook_* through Kubernetes' package.
var (
	// Registry holds the admission chain's latency families.
	Registry = metrics.NewKubeRegistry()

	stepLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "apiserver", Subsystem: "admission", Name: "step_admission_duration_seconds",
		Help:           "Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit).",
		Buckets:        admissionBuckets,
		StabilityLevel: metrics.STABLE,
	}, []string{"type", "operation", "rejected"})
	stepSummary = metrics.NewSummaryVec(&metrics.SummaryOpts{
		Namespace: "apiserver", Subsystem: "admission", Name: "step_admission_duration_seconds_summary",
		Help:           "Admission sub-step latency summary in seconds, broken out for each operation and API resource and step type (validate or admit).",
		MaxAge:         5 * time.Hour, // as kube-apiserver's
		StabilityLevel: metrics.ALPHA,
	}, []string{"type", "operation", "rejected"})
	controllerLatency = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "apiserver", Subsystem: "admission", Name: "controller_admission_duration_seconds",
		Help:           "Admission controller latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
		Buckets:        admissionBuckets,
		StabilityLevel: metrics.STABLE,
	}, []string{"name", "type", "operation", "rejected"})
)

// admissionBuckets are kube-apiserver's for both histograms.
var admissionBuckets = []float64{0.005, 0.025, 0.1, 0.5, 1.0, 2.5}

func init() {
	Registry.MustRegister(stepLatency, stepSummary, controllerLatency)
}

// Owns reports whether Registry serves the metric family name.
func Owns(family string) bool {
	return family == stepLatency.FQName() || family == stepSummary.FQName() || family == controllerLatency.FQName()
}

// The steps and operations a series is kept for: every operation
// admission sees (others are observed through a lookup each time).
const (
	stepAdmit, stepValidate = 0, 1
)

var (
	stepNames  = [2]string{"admit", "validate"}
	operations = [...]admission.Operation{admission.Create, admission.Update, admission.Delete, admission.Connect}
)

func operationIndex(op admission.Operation) int {
	for i, o := range operations {
		if o == op {
			return i
		}
	}
	return -1
}

// observers are one plugin's (or the chain's) series, created on their
// first observation, as a label lookup would create them: by step,
// operation and whether the plugin rejected the request.
type observers struct {
	lookup func(step string, op admission.Operation, rejected bool) []prometheus.Observer
	kept   [2][len(operations)][2]atomic.Pointer[[]prometheus.Observer]
}

func (o *observers) observe(step int, op admission.Operation, rejected bool, elapsed time.Duration) {
	var obs []prometheus.Observer
	if i := operationIndex(op); i < 0 {
		obs = o.lookup(stepNames[step], op, rejected)
	} else {
		r := 0
		if rejected {
			r = 1
		}
		slot := &o.kept[step][i][r]
		if p := slot.Load(); p != nil {
			obs = *p
		} else {
			obs = o.lookup(stepNames[step], op, rejected)
			slot.Store(&obs)
		}
	}
	s := elapsed.Seconds()
	for _, ob := range obs {
		ob.Observe(s)
	}
}

// timed is a plugin (or the chain) whose admit and validate steps are
// observed, as Kubernetes' pluginHandlerWithMetrics observes them: only
// the steps the plugin has, rejected meaning that the step returned an
// error.
type timed struct {
	admission.Interface
	obs *observers
}

func (t *timed) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	m, ok := t.Interface.(admission.MutationInterface)
	if !ok {
		return nil
	}
	start := time.Now()
	err := m.Admit(ctx, a, o)
	t.obs.observe(stepAdmit, a.GetOperation(), err != nil, time.Since(start))
	return err
}

func (t *timed) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	v, ok := t.Interface.(admission.ValidationInterface)
	if !ok {
		return nil
	}
	start := time.Now()
	err := v.Validate(ctx, a, o)
	t.obs.observe(stepValidate, a.GetOperation(), err != nil, time.Since(start))
	return err
}

// withControllerMetrics is the Decorator that times each plugin
// (apiserver_admission_controller_admission_duration_seconds).
func withControllerMetrics(plugin admission.Interface, name string) admission.Interface {
	return &timed{Interface: plugin, obs: &observers{
		lookup: func(step string, op admission.Operation, rejected bool) []prometheus.Observer {
			return []prometheus.Observer{controllerLatency.WithLabelValues(name, step, string(op), strconv.FormatBool(rejected))}
		},
	}}
}

// withStepMetrics times the whole chain's steps
// (apiserver_admission_step_admission_duration_seconds and its summary).
func withStepMetrics(chain admission.Interface) admission.Interface {
	return &timed{Interface: chain, obs: &observers{
		lookup: func(step string, op admission.Operation, rejected bool) []prometheus.Observer {
			lv := []string{step, string(op), strconv.FormatBool(rejected)}
			return []prometheus.Observer{stepLatency.WithLabelValues(lv...), stepSummary.WithLabelValues(lv...)}
		},
	}}
}
