// Package election runs a component while it holds a coordination.k8s.io
// Lease, as kube-controller-manager and kube-scheduler do: one active
// instance among those sharing a cluster, the others waiting to take over.
package election

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	// leader_election_master_status on /metrics.
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection"
)

// ErrLost is returned by Run when the lease was lost and Options.Recampaign
// is off.
var ErrLost = errors.New("election: leader lease lost")

// Options configure one election.
type Options struct {
	// Config reaches the API server holding the Lease (or Client, if set).
	Config *rest.Config
	Client kubernetes.Interface
	// Namespace and Name name the Lease (kube-system/kube-scheduler, ...).
	Namespace, Name string
	// Identity is this candidate's holderIdentity (default: the host
	// name, an underscore and a random UUID, as upstream components use).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// (defaults 15 s, 10 s, 2 s, as kube-controller-manager's flags).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Recampaign makes Run stand again after losing the lease, once the
	// component has stopped, instead of returning ErrLost. In-process
	// components use it: a database hiccup must not end the server.
	Recampaign bool
	// OnLeading, if set, is told whenever this candidate starts (true) or
	// stops (false) leading.
	OnLeading func(leading bool)
}

// DefaultIdentity is the host name with a unique suffix, so two processes
// on one host never share an identity.
func DefaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sqlkube"
	}
	return host + "_" + string(uuid.NewUUID())
}

func (o *Options) defaults() {
	if o.Identity == "" {
		o.Identity = DefaultIdentity()
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
}

// Run calls lead with a context that ends when the lease is lost or ctx
// ends, and returns once lead has returned: nil when ctx ended, ErrLost
// when the lease was lost (unless Recampaign), or an error in the options.
// The lease is released when ctx ends, so a standby takes over at once.
func Run(ctx context.Context, opts Options, lead func(ctx context.Context)) error {
	opts.defaults()
	cs := opts.Client
	if cs == nil {
		var err error
		if cs, err = kubernetes.NewForConfig(rest.AddUserAgent(rest.CopyConfig(opts.Config), "leader-election")); err != nil {
			return fmt.Errorf("election: %w", err)
		}
	}
	lease := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: opts.Identity},
	}
	for {
		lock := &heldLock{Interface: lease}
		done := make(chan struct{})
		runCtx, stop := context.WithCancel(ctx)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   opts.LeaseDuration,
			RenewDeadline:   opts.RenewDeadline,
			RetryPeriod:     opts.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            opts.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					defer close(done)
					// client-go runs this in a goroutine of its own,
					// which recovers nothing: a component that panics
					// (as the controller manager's builders do when
					// stopped while they build) must not end a process
					// that hosts others.
					defer utilruntime.HandleCrashWithContext(ctx)
					t := &term{ctx: ctx, lock: lock, renewDeadline: opts.RenewDeadline, stop: stop}
					defer terms.add(opts.Name, t)()
					go stepDownWhenStale(t, opts.RetryPeriod/4)
					if opts.OnLeading != nil {
						opts.OnLeading(true)
						defer opts.OnLeading(false)
					}
					lead(ctx)
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			stop()
			return fmt.Errorf("election: %w", err)
		}
		// Run returns when ctx ends or the lease is lost, having cancelled
		// lead's context; it started lead (in a goroutine) if and only if
		// it wrote the lease as its holder.
		le.Run(runCtx)
		stop()
		if lock.held.Load() {
			<-done
		}
		if ctx.Err() != nil {
			return nil
		}
		if !opts.Recampaign {
			return ErrLost
		}
	}
}

// stepDownWhenStale ends the term once it is no longer active (its lease
// unrenewed for the renew deadline; see term.active), checking every tick. client-go's elector
// notices that too, but only when its renew loop runs again: a process
// that was paused past its lease (SIGSTOP, a frozen VM) went on acting as
// the leader for a second or more after it resumed, beside the candidate
// that had taken the lease meanwhile. The monotonic clock counts the
// pause, so the first tick after it ends the term.
func stepDownWhenStale(t *term, tick time.Duration) {
	tk := time.NewTicker(max(tick, 10*time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tk.C:
			if !t.active() {
				return
			}
		}
	}
}

// heldLock records whether this candidate ever wrote the lease as its
// holder, which client-go's elector does only on acquiring it, and when
// it last did. It also keeps client-go's release from clearing a lease
// that another candidate holds.
type heldLock struct {
	resourcelock.Interface
	held atomic.Bool

	mu         sync.Mutex
	renewed    time.Time // with its monotonic reading
	lastHolder string    // the holder the last Get read
}

// errNotHolder refuses a release of a lease this candidate does not hold.
var errNotHolder = errors.New("election: not releasing a lease another candidate holds")

func (l *heldLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.mu.Lock()
		l.lastHolder = rec.HolderIdentity
		l.mu.Unlock()
	}
	return rec, raw, err
}

// sinceRenewed is how long ago this candidate last wrote the lease as
// its holder.
func (l *heldLock) sinceRenewed() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Since(l.renewed)
}

// Create and Update count a successful write from when it was sent, not
// when its answer came: the other candidates time the lease from the
// write, and an answer can arrive late (the process was paused while it
// was in flight), when the lease has long expired for everyone else.
func (l *heldLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	sent := time.Now()
	err := l.Interface.Create(ctx, ler)
	l.record(ler, err, sent)
	return err
}

// Update refuses a release (an empty holder) unless the lease as last
// read names this candidate. client-go's elector releases on stepping
// down: it reads the lease, then writes an empty holder if its own,
// possibly old, view says it leads. A candidate that was paused past its
// lease would so clear the lease of the one that took over meanwhile,
// and take it back at once (the write carries the fresh read's
// resourceVersion, so nothing else stops it): two leaders until the
// other's renew deadline ran out.
func (l *heldLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		l.mu.Lock()
		holder := l.lastHolder
		l.mu.Unlock()
		if holder != l.Identity() {
			return errNotHolder
		}
	}
	sent := time.Now()
	err := l.Interface.Update(ctx, ler)
	l.record(ler, err, sent)
	return err
}

func (l *heldLock) record(ler resourcelock.LeaderElectionRecord, err error, sent time.Time) {
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.held.Store(true)
		l.mu.Lock()
		if sent.After(l.renewed) {
			l.renewed = sent
		}
		l.mu.Unlock()
	}
}
