// Package fake simulates nodes: it registers Node objects, keeps them alive
// with Leases and status updates as kubelets do, and runs the pods bound to
// them without containers (they go Running at once, and finish when their
// annotations or their Job say so). It is a plain client-go client: it
// works against any Kubernetes API server.
//
// Thousands of nodes cost little: there is no goroutine or timer per node
// or pod. Nodes and pods are keys of two delaying work queues (a
// time-ordered heap each), drained by a few workers; one node informer and
// one pod informer (pods with a spec.nodeName, kept only when the node is
// one of ours) feed them.
package fake

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// NodeLeaseNamespace is where nodes' Leases live.
const NodeLeaseNamespace = corev1.NamespaceNodeLease

// Simulator runs Options.Count simulated nodes until its Run's ctx ends.
type Simulator struct {
	opts  Options
	addrs addressing
	// nodes is fixed after New: every simulated node by name.
	nodes map[string]*node
	names []string

	nodeQueue workqueue.TypedDelayingInterface[string]
	podQueue  workqueue.TypedDelayingInterface[string]
	nodeInf   cache.SharedIndexInformer
	podInf    cache.SharedIndexInformer
	nodeList  corelisters.NodeLister
	podList   corelisters.PodLister

	kubeletVersion string
	registered     atomic.Int64
	allRegistered  chan struct{}
	// regSlots bounds the first registrations in the node queue (see feed).
	regSlots chan struct{}

	// mu guards pods.
	mu   sync.Mutex
	pods map[string]*podState
}

// node is one simulated node. Its queue key is its name, so one worker at
// a time owns the fields below mu; pod workers only take IPs under mu.
type node struct {
	name  string
	index int
	ip    netip.Addr

	registered  bool
	uid         types.UID
	lease       *coordv1.Lease
	lastStatus  time.Time
	statusDirty atomic.Bool
	// first is set by feed: the node's first registration holds one of
	// regSlots, given back by the sync that finds first set.
	first atomic.Bool
	// deletedUID is set by the node informer when the Node goes.
	deletedUID atomic.Pointer[types.UID]

	mu      sync.Mutex
	podCIDR netip.Prefix
	usedIPs [256]bool
}

// New checks opts and prepares a simulator; Run starts it.
func New(opts Options) (*Simulator, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	addrs, err := newAddressing(opts.NodeIPRange, opts.PodCIDRRange, opts.Count)
	if err != nil {
		return nil, err
	}
	s := &Simulator{
		opts: opts, addrs: addrs, nodes: make(map[string]*node, opts.Count),
		pods: map[string]*podState{}, allRegistered: make(chan struct{}),
	}
	for i := range opts.Count {
		n := &node{name: opts.NamePrefix + strconv.Itoa(i), index: i, ip: addrs.nodeIP(i), podCIDR: addrs.podCIDR(i)}
		s.nodes[n.name] = n
		s.names = append(s.names, n.name)
	}
	if opts.Count == 0 {
		close(s.allRegistered)
	}
	return s, nil
}

// NodeNames are the simulated nodes' names, in index order.
func (s *Simulator) NodeNames() []string { return append([]string(nil), s.names...) }

// Registered is closed once every node has been registered (created or
// adopted, with its Lease).
func (s *Simulator) Registered() <-chan struct{} { return s.allRegistered }

// Run registers the nodes and keeps them and their pods going until ctx
// ends. The Node objects (and Leases) stay when it returns: their
// heartbeats stop, as a stopped kubelet's do.
func (s *Simulator) Run(ctx context.Context) error {
	log := s.opts.Logger
	s.kubeletVersion = s.opts.KubeletVersion
	if s.kubeletVersion == "" {
		v, err := s.opts.Client.Discovery().ServerVersion()
		if err != nil {
			return fmt.Errorf("fake: server version: %w", err)
		}
		s.kubeletVersion = v.GitVersion
	}
	s.nodeQueue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "fake-nodes"})
	s.podQueue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "fake-pods"})
	defer s.podQueue.ShutDown()
	defer s.nodeQueue.ShutDown()

	s.nodeInf = coreinformers.NewNodeInformer(s.opts.Client, 0, cache.Indexers{})
	s.podInf = coreinformers.NewFilteredPodInformer(s.opts.Client, metav1.NamespaceAll, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		})
	if err := s.nodeInf.SetTransform(dropManagedFields); err != nil {
		return err
	}
	if err := s.podInf.SetTransform(s.trimPod); err != nil {
		return err
	}
	s.nodeList = corelisters.NewNodeLister(s.nodeInf.GetIndexer())
	s.podList = corelisters.NewPodLister(s.podInf.GetIndexer())
	if _, err := s.nodeInf.AddEventHandler(s.nodeHandler()); err != nil {
		return err
	}
	if _, err := s.podInf.AddEventHandler(s.podHandler()); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	wg.Go(func() { s.nodeInf.RunWithContext(informerCtx) })
	wg.Go(func() { s.podInf.RunWithContext(informerCtx) })
	if !cache.WaitForCacheSync(ctx.Done(), s.nodeInf.HasSynced, s.podInf.HasSynced) {
		return ctx.Err()
	}
	log.Info().Int("nodes", s.opts.Count).Str("prefix", s.opts.NamePrefix).Str("kubeletVersion", s.kubeletVersion).Msg("simulating nodes")
	s.regSlots = make(chan struct{}, max(s.opts.NodeWorkers/2, 1))
	wg.Go(func() { s.feed(ctx) })
	for range s.opts.NodeWorkers {
		wg.Go(func() { s.work(ctx, s.nodeQueue, s.syncNode) })
	}
	for range s.opts.PodWorkers {
		wg.Go(func() { s.work(ctx, s.podQueue, s.syncPod) })
	}
	<-ctx.Done()
	s.nodeQueue.ShutDown()
	s.podQueue.ShutDown()
	log.Info().Msg("simulated nodes stopped (their Node objects stay)")
	return nil
}

// feed queues the nodes for their first registration a few at a time:
// at most half the node workers' worth are queued or registering at once,
// so the Lease renewals of the nodes already registered always find a
// worker soon. Queued all at once, thousands of registrations stood ahead
// of every renewal: on a busy server the first nodes' Leases went
// unrenewed for longer than the node-monitor grace period, the
// node-lifecycle controller marked them NotReady and tainted them, and
// the status writes that answered slowed the server further, until most
// of 5,000 nodes were NotReady.
func (s *Simulator) feed(ctx context.Context) {
	for _, name := range s.names {
		select {
		case s.regSlots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		s.nodes[name].first.Store(true)
		s.nodeQueue.Add(name)
	}
}

// work drains q with sync until q shuts down.
func (s *Simulator) work(ctx context.Context, q workqueue.TypedDelayingInterface[string], sync func(context.Context, string)) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if ctx.Err() == nil {
			sync(ctx, key)
		}
		q.Done(key)
	}
}

func dropManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// trimPod keeps only the name and node of pods on other nodes, so that a
// cluster's other pods cost the simulator little memory.
func (s *Simulator) trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	if s.nodes[p.Spec.NodeName] == nil {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
			Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
		}, nil
	}
	p.ManagedFields = nil
	return p, nil
}

func (s *Simulator) nodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			o, ok := obj.(*corev1.Node)
			if !ok {
				return
			}
			n := s.nodes[o.Name]
			if n == nil {
				return
			}
			if err := n.setPodCIDR(o.Spec.PodCIDR); err != nil {
				s.opts.Logger.Warn().Err(err).Msg("a pod CIDR the simulator cannot use; its pods keep the simulator's")
			}
			if n.registered && !nodeLooksAlive(o) {
				n.statusDirty.Store(true)
				s.nodeQueue.Add(n.name)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(*corev1.Node); ok {
				if n := s.nodes[o.Name]; n != nil {
					uid := o.UID
					n.deletedUID.Store(&uid)
					s.nodeQueue.Add(n.name) // registers it again
				}
			}
		},
	}
}

// nodeLooksAlive reports whether n shows what a simulated node writes; a
// node that another writer changed (the node lifecycle controller marking
// it NotReady) gets its status written again.
func nodeLooksAlive(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
