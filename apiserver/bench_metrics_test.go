package apiserver_test

import (
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/apiserver/admission"
)

// BenchmarkServer_RequestMetricsCost: what the request metrics
// (filters.RequestMetrics), the admission metrics (admission/metrics.go) and
// both cost pod creates, as sub-benchmarks request, admission and both,
// and, as a control, none: two servers alike, whose difference is the
// benchmark's own noise and bias.
// Two servers, one with them and one without (Config.DisableRequestMetrics,
// DisableAdmissionMetrics), each on its own SQLite database, take turns
// creating a batch of pods with 20 concurrent clients (which goes first
// alternates each round). Reported: each one's median creates/s, the
// median over the rounds of the round's throughput cost (1 -
// with/without, in percent), and the process's CPU time per create (user
// + system, the clients' included: the servers never run at the same
// time) with its cost, the cost over all the rounds' creates
// (pooled-cost-%: 1 - without's time / with's time), and how many
// admission plugin latencies each metered create observes. b.N is the
// number of rounds.
func BenchmarkServer_RequestMetricsCost(b *testing.B) {
	for _, bc := range []struct {
		name    string
		without apiserver.Config
	}{
		{"request", apiserver.Config{DisableRequestMetrics: true}},
		{"admission", apiserver.Config{DisableAdmissionMetrics: true}},
		{"both", apiserver.Config{DisableRequestMetrics: true, DisableAdmissionMetrics: true}},
		{"none", apiserver.Config{}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchmarkMetricsCost(b, bc.without) })
	}
}

func benchmarkMetricsCost(b *testing.B, withoutConfig apiserver.Config) {
	const clients, batch = 20, 500
	with, _ := newServerWith(b, apiserver.Config{})
	without, _ := newServerWith(b, withoutConfig)
	cs := [2]*kubernetes.Clientset{benchClient(b, with), benchClient(b, without)}
	var rates, cpu [2][]float64
	var next [2]int
	// A first batch each, not counted: caches, connections, the
	// database's first pages.
	for i := range cs {
		createPods(b, cs[i], 0, batch, clients)
		next[i] = batch
	}
	var costs, cpuCosts []float64
	var total [2]time.Duration
	observed := admissionObservations(b)
	b.ResetTimer()
	for round := range b.N {
		for k := range 2 {
			i := (round + k) % 2
			// The servers share the process's heap: collect the other
			// one's garbage before this one's batch, not during it.
			runtime.GC()
			before := cpuTime(b)
			took := createPods(b, cs[i], next[i], batch, clients)
			total[i] += took
			cpu[i] = append(cpu[i], float64((cpuTime(b)-before).Microseconds())/batch)
			next[i] += batch
			rates[i] = append(rates[i], batch/took.Seconds())
		}
		costs = append(costs, 100*(1-rates[0][round]/rates[1][round]))
		cpuCosts = append(cpuCosts, 100*(cpu[0][round]/cpu[1][round]-1))
	}
	b.StopTimer()
	if withoutConfig.DisableAdmissionMetrics { // else both servers observe
		b.ReportMetric((admissionObservations(b)-observed)/float64(b.N*batch), "admission-observations/create")
	}
	b.ReportMetric(median(rates[0]), "with-creates/s")
	b.ReportMetric(median(rates[1]), "without-creates/s")
	b.ReportMetric(median(costs), "cost-%")
	// Over all the rounds: the same number of creates each.
	b.ReportMetric(100*(1-total[1].Seconds()/total[0].Seconds()), "pooled-cost-%")
	b.ReportMetric(median(cpu[0]), "with-cpu-µs/create")
	b.ReportMetric(median(cpu[1]), "without-cpu-µs/create")
	b.ReportMetric(median(cpuCosts), "cpu-cost-%")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// admissionObservations is how many times the admission plugins' latency
// (apiserver_admission_controller_admission_duration_seconds) was
// observed for creates so far.
func admissionObservations(b *testing.B) float64 {
	mfs, err := admission.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "apiserver_admission_controller_admission_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "operation") == "CREATE" {
				n += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n
}
