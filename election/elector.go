package election

import (
	"context"
	"sync"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// Elector decides when a component runs. Run calls lead with a context
// that ends when this process may no longer act for the component, or
// when ctx ends, and returns once lead has returned: nil when ctx ended,
// or an error (ErrLost from a Lease that does not recampaign). Lead may
// be called again after its context ended, never twice at once.
type Elector interface {
	Run(ctx context.Context, lead func(ctx context.Context)) error
}

// Lease is the Elector of one Lease of the component's own: Run is
// election.Run with opts.
func Lease(opts Options) Elector { return leaseElector(opts) }

type leaseElector Options

func (e leaseElector) Run(ctx context.Context, lead func(ctx context.Context)) error {
	return Run(ctx, Options(e), lead)
}

// Policy says how a component that has leader-election flags of its own
// (the controller manager, the scheduler) is elected.
type Policy struct {
	// Elector, if set, decides when the component runs; its own Lease and
	// its --leader-elect* flags are then not used.
	Elector Elector
	// Recampaign, on the component's own Lease, stands again after
	// losing it instead of returning ErrLost (Options.Recampaign).
	Recampaign bool
}

// Gate is an Elector for many components that one decision governs:
// they run while a term that Lead opened holds, and stop when it ends. A
// tenant host runs every tenant's controller manager and scheduler
// through one Gate, whose terms are the host's own Lease, instead of two
// Leases per tenant, each renewed every 2 s.
//
// A Gate guarantees what its terms guarantee: a component runs only
// inside a term, and a term ends only once every component it started
// has returned. Terms never overlap as long as Lead is called from one
// goroutine at a time, as election.Run calls its lead.
type Gate struct {
	mu sync.Mutex // guards term and opened
	// term is the open term (nil: closed); opened is closed when the
	// next term opens.
	term   *gateTerm
	opened chan struct{}
}

type gateTerm struct {
	ctx     context.Context
	over    chan struct{}  // closed once the gate no longer names it
	running sync.WaitGroup // components inside the term
}

// NewGate returns a closed Gate.
func NewGate() *Gate { return &Gate{opened: make(chan struct{})} }

// Lead opens a term that lasts until ctx ends, and returns when it has
// ended and every component that ran in it has returned.
func (g *Gate) Lead(ctx context.Context) {
	t := &gateTerm{ctx: ctx, over: make(chan struct{})}
	g.mu.Lock()
	g.term = t
	close(g.opened)
	g.mu.Unlock()
	<-ctx.Done()
	g.mu.Lock()
	g.term, g.opened = nil, make(chan struct{})
	g.mu.Unlock()
	close(t.over)
	t.running.Wait()
}

// Open reports whether a term holds now.
func (g *Gate) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.term != nil
}

// Run runs lead in every term of the gate until ctx ends, with a
// context that ends with the term or with ctx, and returns nil once ctx
// has ended. A lead that returns (or panics) while its term holds is run
// again in the next term, not at once.
func (g *Gate) Run(ctx context.Context, lead func(ctx context.Context)) error {
	for {
		g.mu.Lock()
		t, opened := g.term, g.opened
		if t != nil {
			t.running.Add(1)
		}
		g.mu.Unlock()
		if t == nil {
			select {
			case <-ctx.Done():
				return nil
			case <-opened:
				continue
			}
		}
		if t.ctx.Err() == nil { // not ending already
			runCtx, cancel := context.WithCancel(ctx)
			stopAfter := context.AfterFunc(t.ctx, cancel)
			func() {
				// A component that panics must not end a process that
				// hosts others (election.Run recovers its leads too).
				defer utilruntime.HandleCrashWithContext(runCtx)
				lead(runCtx)
			}()
			stopAfter()
			cancel()
		}
		t.running.Done()
		select {
		case <-ctx.Done():
			return nil
		case <-t.over: // then the next term
		}
	}
}

var (
	_ Elector = (*Gate)(nil)
	_ Elector = leaseElector{}
)
