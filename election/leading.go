package election

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// term is one candidate's time as leader: from OnStartedLeading until its
// context ends.
type term struct {
	ctx           context.Context
	lock          *heldLock
	renewDeadline time.Duration
	stop          func()
}

// active says whether the term still holds: its context is live and the
// lease was renewed within the renew deadline. A term found stale is
// ended here and now, rather than at the watchdog's next tick, so that
// what this process reports is what it does.
func (t *term) active() bool {
	if t.ctx.Err() != nil {
		return false
	}
	if since := t.lock.sinceRenewed(); since > t.renewDeadline {
		klog.ErrorS(nil, "Stepping down: the lease went unrenewed past the renew deadline", "lease", t.lock.Describe(), "unrenewedFor", since)
		t.stop()
		return false
	}
	return true
}

// termSet holds the terms of this process, by lease name.
type termSet struct {
	mu sync.Mutex
	by map[string]map[*term]struct{}
}

var terms = &termSet{by: map[string]map[*term]struct{}{}}

// add records t under name and returns the func that removes it.
func (s *termSet) add(name string, t *term) func() {
	registerLeadingMetric()
	s.mu.Lock()
	if s.by[name] == nil {
		s.by[name] = map[*term]struct{}{}
	}
	s.by[name][t] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.by[name], t)
		s.mu.Unlock()
	}
}

// leading reports, per lease name this process has stood for, whether
// one of its terms is active.
func (s *termSet) leading() map[string]bool {
	s.mu.Lock()
	all := map[string][]*term{}
	for name, ts := range s.by {
		all[name] = nil
		for t := range ts {
			all[name] = append(all[name], t)
		}
	}
	s.mu.Unlock()
	out := make(map[string]bool, len(all))
	for name, ts := range all {
		out[name] = false
		for _, t := range ts {
			if t.active() {
				out[name] = true
			}
		}
	}
	return out
}

// Leading says whether this process leads the lease called name now: a
// term of one of its candidates is running and the lease was renewed
// within the renew deadline.
func Leading(name string) bool { return terms.leading()[name] }

// leadingDesc is sqlkube_leader_election_leading{name}: 1 while this
// process acts as the lease's leader. client-go's
// leader_election_master_status stays 1 until its elector's renew loop
// ends, which can be seconds after the term did.
var leadingDesc = prometheus.NewDesc("sqlkube_leader_election_leading",
	"1 while this process acts as the named lease's leader: its term is running and the lease was renewed within the renew deadline.",
	[]string{"name"}, nil)

type leadingCollector struct{}

func (leadingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- leadingDesc }

func (leadingCollector) Collect(ch chan<- prometheus.Metric) {
	for name, on := range terms.leading() {
		v := 0.0
		if on {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(leadingDesc, prometheus.GaugeValue, v, name)
	}
}

var registerLeading sync.Once

func registerLeadingMetric() {
	registerLeading.Do(func() { legacyregistry.RawMustRegister(leadingCollector{}) })
}
