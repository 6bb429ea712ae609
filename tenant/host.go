package tenant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sqlkube/sqlkube/controlplane"
	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/identity"
)

// HostConfig configures a tenant host.
type HostConfig struct {
	// DataDir holds each tenant's certificates and kubeconfig under
	// tenants/NAME, and on SQLite its database (tenants/NAME/state.db).
	DataDir string
	// BindAddress is where tenants' APIs listen; EndpointHost is the host
	// name or address in their endpoints and kubeconfigs ("": the
	// loopback address when BindAddress is every address).
	BindAddress, EndpointHost string
	// Advertise is the address tenants' kubernetes Services name ("":
	// the host's).
	Advertise string
	// PortMin and PortMax bound the tenants' API ports; both 0: any free
	// port the system gives (tests), kept in the tenant's status.
	PortMin, PortMax int
	// DNSPortMin and DNSPortMax bound the ports of the tenants' cluster
	// DNS (UDP and TCP), at the same offset as their API ports' (a
	// tenant on PortMin+i answers DNS on DNSPortMin+i); both 0: a port
	// the system gives. Each tenant serves DNS on the advertised address
	// once it has a Node that is not simulated; the kube-dns Service
	// sends its pods there.
	DNSPortMin, DNSPortMax int
	// DisableDNS: tenants serve no cluster DNS.
	DisableDNS bool
	// QuotaBytes is a tenant's datastore quota unless its spec gives one
	// (0: the store's default).
	QuotaBytes int64
	// Components run in each tenant (nil: `sqlkube server`'s defaults).
	Components *controlplane.Components
	// FakeNodes simulated nodes run in each tenant (testing).
	FakeNodes int
	// Shared, if set, is the datastore called "default" (DefaultDatastore):
	// one PostgreSQL database that holds tenants in a schema and a role
	// of their own each, on the handle's bounded pool.
	Shared *sqlstore.Shared
	// Datastores are the host's other datastores, by name; "sqlite" (a
	// SQLite file each, under DataDir/tenants/NAME) is always one.
	Datastores []Datastore
	// DefaultDatastore names where a tenant whose spec names no datastore
	// is placed ("": "default" if Shared is set, else "sqlite").
	DefaultDatastore string
	// BackupDir holds the TenantBackups' files ("": DataDir/backups).
	BackupDir string
	// Metrics, if set, gets the per-tenant figures (NewMetrics).
	Metrics *Metrics
	// Identity is this host's in the election of LeaseName ("": a new
	// one each run). A host started again with the identity it had takes
	// its Lease back at once, not after the Lease's 15 s.
	Identity string
	Log      zerolog.Logger
}

// LeaseName is the host's Lease, in kube-system of the host's own API:
// the host that holds it runs its tenants' controller managers and
// schedulers (Host.Run).
const LeaseName = "sqlkube-tenant-host"

// BookmarkTick is a tenant's controlplane.Config.WatchCacheBookmarkTick
// (and the host API's own: cmd/sqlkube).
const BookmarkTick = 10 * time.Second

// Host runs the tenants of the Tenant objects in its API.
type Host struct {
	cfg     HostConfig
	rc      *rest.Config
	dyn     dynamic.Interface
	tenants dynamic.ResourceInterface
	cs      kubernetes.Interface
	lister  cache.GenericLister
	queue   workqueue.TypedRateLimitingInterface[string]
	// components runs every tenant's controller manager and scheduler
	// while this host holds LeaseName (Run).
	components *election.Gate
	// leading is set while this host holds LeaseName: it alone changes
	// tenants (create, suspend, move, delete, their status); another
	// host on the same host datastore serves the Ready ones beside it
	// (standby).
	leading atomic.Bool

	// stores are the datastores by name; defaultStore names the default.
	stores       map[string]*Datastore
	defaultStore string
	// dataLocks holds a mutex per tenant name (lockTenant).
	dataLocks sync.Map
	// restoreFailed holds a retryAfter per tenant whose restore failed.
	restoreFailed sync.Map
	// bg runs what Run waits for besides its workers (dropInBackground).
	bg sync.WaitGroup
	// backups reconciles TenantBackups (backup.go).
	backups       workqueue.TypedRateLimitingInterface[string]
	backupsLister cache.GenericLister

	mu    sync.Mutex
	slots map[string]*slot
}

// slot is a tenant this host runs or holds suspended.
type slot struct {
	port int
	// dnsPort is where its DNS answers while it runs (0: none).
	dnsPort int
	in      *instance     // running (nil: suspended or stopped)
	wake    *wakeListener // suspended, holding the port
	// woken is set when a request woke the tenant and the host has not
	// yet seen its spec resumed.
	woken bool
	// datastore names where the tenant's data is, as this host last
	// placed or moved it ("": as its status says).
	datastore string
	// provisioned names the datastore where its place was made by this
	// host.
	provisioned string
	// moving is set while a move has the tenant stopped: nothing starts it.
	moving bool
	// moveFailed is the last move that failed, until it is tried again.
	moveFailed *moveFailure
	// dropping is set while its pending copies are dropped.
	dropping bool
	// checked is set once its data was found where its status says.
	checked bool
}

// hostQPS is the rate of the host's client of its API, unless rc sets
// one.
const hostQPS = 1000

// NewHost builds a host over the host API's cfg.
func NewHost(cfg HostConfig, rc *rest.Config) (*Host, error) {
	if (cfg.PortMin != 0 || cfg.PortMax != 0) && (cfg.PortMin <= 0 || cfg.PortMax < cfg.PortMin) {
		return nil, fmt.Errorf("tenant port range %d-%d is empty", cfg.PortMin, cfg.PortMax)
	}
	if !cfg.DisableDNS && (cfg.DNSPortMin != 0 || cfg.DNSPortMax != 0) {
		if cfg.DNSPortMin <= 0 || cfg.DNSPortMax < cfg.DNSPortMin {
			return nil, fmt.Errorf("tenant DNS port range %d-%d is empty", cfg.DNSPortMin, cfg.DNSPortMax)
		}
		if cfg.PortMin == 0 || cfg.DNSPortMax-cfg.DNSPortMin < cfg.PortMax-cfg.PortMin {
			return nil, fmt.Errorf("tenant DNS port range %d-%d: want one as long as the API ports' %d-%d", cfg.DNSPortMin, cfg.DNSPortMax, cfg.PortMin, cfg.PortMax)
		}
	}
	if cfg.EndpointHost == "" {
		cfg.EndpointHost = "127.0.0.1"
		if ip := net.ParseIP(cfg.BindAddress); ip != nil && !ip.IsUnspecified() {
			cfg.EndpointHost = cfg.BindAddress
		}
	}
	if rc.QPS == 0 && rc.Burst == 0 {
		// client-go's default, 5 requests a second (bursts of 10), is
		// what made tenants created one after another wait: a create
		// takes some ten requests of the host's API (the Tenant's
		// finalizer and status, its Secrets). The host is its API's
		// own, trusted client.
		rc = rest.CopyConfig(rc)
		rc.QPS, rc.Burst = hostQPS, 2*hostQPS
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	stores, def, err := datastores(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.BackupDir == "" {
		cfg.BackupDir = filepath.Join(cfg.DataDir, "backups")
	}
	return &Host{cfg: cfg, rc: rc, dyn: dyn, tenants: dyn.Resource(GVR), cs: cs, slots: map[string]*slot{},
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		backups:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		components: election.NewGate(), stores: stores, defaultStore: def}, nil
}

// Install makes the Tenant and TenantBackup resources and the tenants'
// namespace on the host API, and waits until the resources are served.
func Install(ctx context.Context, rc *rest.Config) error {
	ax, err := apiextensionsclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		for _, crd := range []*apiextensionsv1.CustomResourceDefinition{CRD(), BackupCRD()} {
			if !established(ctx, ax, crd) {
				return false, nil
			}
		}
		return true, nil
	})
}

// crdHash annotates a CRD the host made with a hash of its spec.
const crdHash = "sqlkube.io/spec-hash"

// established makes crd unless it exists (one an older host made is
// updated to crd), and reports whether it is served.
func established(ctx context.Context, ax apiextensionsclient.Interface, crd *apiextensionsv1.CustomResourceDefinition) bool {
	spec, _ := json.Marshal(crd.Spec)
	sum := sha256.Sum256(spec)
	crd = crd.DeepCopy()
	crd.Annotations = map[string]string{crdHash: hex.EncodeToString(sum[:8])}
	crds := ax.ApiextensionsV1().CustomResourceDefinitions()
	got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, _ = crds.Create(ctx, crd, metav1.CreateOptions{})
		return false
	}
	if err != nil {
		return false
	}
	if got.Annotations[crdHash] != crd.Annotations[crdHash] {
		crd.ResourceVersion = got.ResourceVersion
		_, _ = crds.Update(ctx, crd, metav1.UpdateOptions{})
		return false
	}
	for _, c := range got.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// Run serves the tenants until ctx ends, then stops them all (their data
// stays).
//
// Their controller managers and schedulers run while this host holds its
// Lease (LeaseName, on the host's API), not each through Leases of its
// own in its tenant: that is one renewal for the whole host instead of
// two Leases per tenant renewed every 2 s, and an idle tenant writes
// nothing. What that guarantees: a tenant's controllers run in the host
// that holds the Lease, and only while it holds it, so two hosts that
// share the host's datastore (and so the Tenant objects) never run one
// tenant's controllers at once. What it does not yet give: every tenant's
// controllers run in that one host, the other running none until it
// takes the Lease over (15 s after the holder stopped renewing it); and
// a second host does not yet share the serving of tenants (ports,
// status, provisioning), which is issue 42's HA.
func (h *Host) Run(ctx context.Context) error {
	var elected sync.WaitGroup
	defer elected.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before elected.Wait, also when Run fails
	elected.Go(func() {
		h.cfg.Log.Info().Str("lease", "kube-system/"+LeaseName).Msg("tenants' controllers run while this host holds its Lease")
		err := election.Run(ctx, election.Options{
			Config: h.rc, Namespace: metav1.NamespaceSystem, Name: LeaseName, Recampaign: true, Identity: h.cfg.Identity,
			OnLeading: func(leading bool) {
				h.cfg.Log.Info().Bool("leading", leading).Msg("the host's Lease: tenants' controllers run, and their lifecycle, while leading")
				h.leading.Store(leading)
				h.requeueAll()
			},
		}, h.components.Lead)
		if err != nil && ctx.Err() == nil {
			h.cfg.Log.Error().Err(err).Msg("the host's election stopped: its tenants' controllers do not run")
		}
	})
	factory := dynamicinformer.NewDynamicSharedInformerFactory(h.dyn, 0)
	inf := factory.ForResource(GVR)
	h.mu.Lock()
	h.lister = inf.Lister()
	h.mu.Unlock()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			h.queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	backupsSynced, err := h.watchBackups(factory)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced, backupsSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		h.queue.ShutDown()
		h.backups.ShutDown()
	}()
	var workers sync.WaitGroup
	for range 4 {
		workers.Go(func() {
			for h.next(ctx) {
			}
		})
	}
	for range 2 {
		workers.Go(func() {
			for h.nextBackup(ctx) {
			}
		})
	}
	workers.Wait()
	h.bg.Wait()
	h.stopAll()
	return nil
}

// requeueAll reconciles every tenant and backup again (the host started
// or stopped leading).
func (h *Host) requeueAll() {
	h.mu.Lock()
	lister, backups := h.lister, h.backupsLister
	h.mu.Unlock()
	addAll(lister, h.queue)
	addAll(backups, h.backups)
}

// addAll queues the key of every object of l (nil: not listing yet, and
// its informer's first list queues them all).
func addAll(l cache.GenericLister, q workqueue.TypedRateLimitingInterface[string]) {
	if l == nil {
		return
	}
	objs, _ := l.List(labels.Everything())
	for _, o := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
			q.Add(key)
		}
	}
}

func (h *Host) next(ctx context.Context) bool {
	name, quit := h.queue.Get()
	if quit {
		return false
	}
	defer h.queue.Done(name)
	requeue, err := h.reconcile(ctx, name)
	switch {
	case err != nil && ctx.Err() == nil:
		h.cfg.Log.Warn().Err(err).Str("tenant", name).Msg("tenant not reconciled; retrying")
		h.queue.AddRateLimited(name)
	case requeue > 0:
		h.queue.Forget(name)
		h.queue.AddAfter(name, requeue)
	default:
		h.queue.Forget(name)
	}
	return true
}

// stopAll stops every running tenant and lets go of suspended ones'
// ports.
func (h *Host) stopAll() {
	h.mu.Lock()
	slots := h.slots
	h.slots = map[string]*slot{}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, sl := range slots {
		wg.Go(func() { h.release(sl) })
	}
	wg.Wait()
}

// release stops what runs in sl and closes its port.
func (h *Host) release(sl *slot) {
	if sl.in != nil {
		_ = sl.in.stop()
		sl.in = nil
	}
	if sl.wake != nil {
		sl.wake.Close()
		sl.wake = nil
	}
}

// get is the Tenant name from the informer's cache (nil: gone).
func (h *Host) get(name string) (*Tenant, error) {
	return fromCache(h.lister, "tenant", name, FromUnstructured)
}

// fromCache is object name of an informer's cache (lister), a copy
// converted by from (nil: gone); kind names it in errors.
func fromCache[T any](lister cache.GenericLister, kind, name string, from func(*unstructured.Unstructured) (*T, error)) (*T, error) {
	obj, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%s %s: unexpected %T", kind, name, obj)
	}
	return from(u.DeepCopy())
}

// reconcile brings tenant name to what its object asks. Every step is
// idempotent, so a host that stopped anywhere (a crash mid-create or
// mid-delete) finishes the job when it starts again.
func (h *Host) reconcile(ctx context.Context, name string) (time.Duration, error) {
	t, err := h.get(name)
	if err != nil {
		return 0, err
	}
	if t == nil { // gone (its finalizer ran on this or another host)
		h.drop(name)
		return 0, nil
	}
	if !h.leading.Load() {
		return h.standby(ctx, t)
	}
	if t.DeletionTimestamp != nil {
		return 0, h.remove(ctx, t)
	}
	if why := ValidName(t.Name); why != "" {
		return 0, h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhaseFailed, why })
	}
	if !hasFinalizer(t) {
		t.Finalizers = append(t.Finalizers, Finalizer)
		if err := h.update(ctx, t); err != nil {
			return 0, err
		}
		crashPoint(CrashAfterFinalizer, t.Name)
		return 0, nil
	}
	token, err := h.ensureToken(ctx, t)
	if err != nil {
		return 0, err
	}
	crashPoint(CrashAfterToken, t.Name)
	if t.Status.Port == 0 {
		port, err := h.allocatePort(t.Name)
		if err != nil {
			return 0, h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhaseFailed, err.Error() })
		}
		if err := h.setStatus(ctx, t, func(s *Status) {
			s.Port, s.Phase, s.Message = port, PhasePending, ""
			s.Endpoint = h.endpoint(port)
			if t.Spec.RestoreFrom == nil { // a restored one once its data is in
				s.Datastore = h.initialDatastore(t)
			}
		}); err != nil {
			return 0, err
		}
		crashPoint(CrashAfterPort, t.Name)
		return 0, nil
	}
	if t.Status.Datastore == "" {
		return h.placeTenant(ctx, t)
	}
	if cur := h.currentDatastore(t); cur != t.Status.Datastore { // an older host's words
		return 0, h.setStatus(ctx, t, func(s *Status) { s.Datastore = cur })
	}
	if h.datastore(t.Status.Datastore) == nil {
		// Never a new empty cluster in place of one whose data is
		// elsewhere (a host restarted without that --tenant-datastore).
		return 0, h.setStatus(ctx, t, func(s *Status) {
			s.Phase, s.Message = PhaseFailed, fmt.Sprintf("its data is in datastore %q, which this host was not given (it has %s)", t.Status.Datastore, h.datastoreNames())
		})
	}
	sl := h.slot(t.Name, t.Status.Port)
	if requeue, done, err := h.reconcileData(ctx, t, sl); done {
		return requeue, err
	}
	h.mu.Lock()
	if !t.Spec.Suspended {
		sl.woken = false
	}
	suspend := t.Spec.Suspended && !sl.woken
	h.mu.Unlock()
	if suspend {
		if err := h.suspend(t.Name, sl); err != nil {
			return 0, err
		}
		return 0, h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhaseSuspended, "" })
	}
	in, err := h.start(ctx, t, sl, token, nil)
	if err != nil {
		return 0, h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhaseFailed, err.Error() })
	}
	select {
	case <-in.done:
		h.forget(sl, in)
		msg := "stopped"
		if in.err != nil {
			msg = in.err.Error()
		}
		if err := h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhaseFailed, msg }); err != nil {
			return 0, err
		}
		return 5 * time.Second, nil // try again
	case <-in.ready:
	default:
		// Starting (after a host restart, the status may still say
		// Ready); the instance enqueues the tenant once it serves or
		// stops.
		return 0, h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhasePending, "starting" })
	}
	sv, _ := in.waitReady(ctx)
	crashPoint(CrashAfterStart, t.Name)
	secret, err := h.ensureKubeconfig(ctx, t, sv)
	if err != nil {
		return 0, err
	}
	crashPoint(CrashAfterSecret, t.Name)
	quota := h.quotaBytes(t)
	msg, err := h.applyQuota(ctx, t, in, quota)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	dnsPort := sl.dnsPort
	h.mu.Unlock()
	return 0, h.setStatus(ctx, t, func(s *Status) {
		s.Phase, s.Message, s.KubeconfigSecret = PhaseReady, msg, secret
		s.Endpoint = h.endpoint(t.Status.Port)
		s.DNSPort = dnsPort
		s.QuotaBytes = quota
	})
}

func hasFinalizer(t *Tenant) bool {
	for _, f := range t.Finalizers {
		if f == Finalizer {
			return true
		}
	}
	return false
}

// slot is tenant name's slot, made for port if there is none.
func (h *Host) slot(name string, port int) *slot {
	h.mu.Lock()
	defer h.mu.Unlock()
	sl := h.slots[name]
	if sl == nil {
		sl = &slot{port: port}
		h.slots[name] = sl
	}
	return sl
}

// drop releases tenant name's slot.
func (h *Host) drop(name string) {
	h.mu.Lock()
	sl := h.slots[name]
	delete(h.slots, name)
	h.mu.Unlock()
	if sl != nil {
		h.release(sl)
	}
}

func (h *Host) endpoint(port int) string {
	return "https://" + net.JoinHostPort(h.cfg.EndpointHost, strconv.Itoa(port))
}

// tenantDir is where tenant name's files are on this host.
func (h *Host) tenantDir(name string) string { return filepath.Join(h.cfg.DataDir, "tenants", name) }

// dsn is tenant name's SQLite DSN (in the datastore "sqlite").
func (h *Host) dsn(name string) string { return "sqlite://" + h.sqlitePath(name) }

// sqlTenant is tenant name's schema and role on a shared database: its
// name with '-' as '_', prefixed (a tenant's name is a DNS label of at
// most 40 characters, so the result is a valid one).
func sqlTenant(name string) sqlstore.Tenant {
	n := "tenant_" + strings.ReplaceAll(name, "-", "_")
	return sqlstore.Tenant{Schema: n, Role: n}
}

// place is where tenant name's store opens, in the datastore sl names:
// its SQLite file, or its schema on a shared database, provisioned
// (again, if a crash left it half-made) the first time this host starts
// it there.
func (h *Host) place(ctx context.Context, name string, sl *slot) (sqlstore.Options, error) {
	ds := h.datastore(sl.datastore)
	if ds == nil {
		return sqlstore.Options{}, fmt.Errorf("tenant %s: no datastore %q", name, sl.datastore)
	}
	if ds.Shared == nil {
		crashPoint(CrashAfterDatastore, name) // its directory is made
		return sqlstore.Options{DSN: h.dsn(name)}, nil
	}
	t := sqlTenant(name)
	if sl.provisioned != ds.Name {
		if err := ds.Shared.Provision(ctx, t); err != nil {
			return sqlstore.Options{}, fmt.Errorf("provision tenant %s: %w", name, err)
		}
		sl.provisioned = ds.Name
		crashPoint(CrashAfterDatastore, name)
	}
	return sqlstore.Options{Shared: ds.Shared, Tenant: t}, nil
}

// allocatePort is the lowest port of the range no other tenant has (or,
// with no range, one the system gives).
func (h *Host) allocatePort(name string) (int, error) {
	if h.cfg.PortMin == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(h.cfg.BindAddress, "0"))
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	objs, err := h.lister.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetName() != name {
			if p, found, _ := unstructured.NestedInt64(u.Object, "status", "port"); found {
				used[int(p)] = true
			}
		}
	}
	for p := h.cfg.PortMin; p <= h.cfg.PortMax; p++ {
		if !used[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port in the host's tenant range %d-%d", h.cfg.PortMin, h.cfg.PortMax)
}

// dnsPort is where the tenant on API port port answers DNS: the same
// offset into the DNS range, or with no range a port free on both UDP
// and TCP.
func (h *Host) dnsPort(port int) (int, error) {
	if h.cfg.DNSPortMin != 0 {
		if p := h.cfg.DNSPortMin + port - h.cfg.PortMin; port >= h.cfg.PortMin && p <= h.cfg.DNSPortMax {
			return p, nil
		}
		return 0, fmt.Errorf("its API port %d is outside the host's range %d-%d, so it has no DNS port in %d-%d", port, h.cfg.PortMin, h.cfg.PortMax, h.cfg.DNSPortMin, h.cfg.DNSPortMax)
	}
	// Free on every address: the DNS listens on the advertised one.
	for range 20 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", ":"+strconv.Itoa(p))
		l.Close()
		if err == nil {
			u.Close()
			return p, nil
		}
	}
	return 0, errors.New("no port free on both UDP and TCP for the tenant's DNS")
}

// listen opens sl's port.
func (h *Host) listen(sl *slot) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(h.cfg.BindAddress, strconv.Itoa(sl.port)))
}

// suspend stops tenant name's control plane, if it runs, and holds its
// port for the request that wakes it.
func (h *Host) suspend(name string, sl *slot) error {
	h.mu.Lock()
	in := sl.in
	sl.in = nil
	h.mu.Unlock()
	if in != nil {
		_ = in.stop()
		h.cfg.Log.Info().Str("tenant", name).Msg("tenant suspended")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.wake != nil || sl.in != nil {
		return nil
	}
	l, err := h.listen(sl)
	if err != nil {
		return fmt.Errorf("hold tenant %s's port: %w", name, err)
	}
	w := listenWake(l)
	sl.wake = w
	go h.awaitWake(name, sl, w)
	return nil
}

// awaitWake resumes tenant name on the first connection to its port.
func (h *Host) awaitWake(name string, sl *slot, w *wakeListener) {
	c, ok := <-w.woke
	if !ok {
		return // the port was let go
	}
	h.mu.Lock()
	if sl.wake != w { // no longer held for waking
		h.mu.Unlock()
		c.Close()
		return
	}
	sl.wake, sl.woken = nil, true
	h.mu.Unlock()
	h.cfg.Log.Info().Str("tenant", name).Msg("a request wakes the suspended tenant")
	t, err := h.get(name)
	if err == nil && t != nil {
		var token string
		if token, err = h.readToken(context.Background(), name); err == nil {
			_, err = h.start(context.Background(), t, sl, token, handoff(w.Listener, c))
		}
	}
	if err != nil {
		h.cfg.Log.Error().Err(err).Str("tenant", name).Msg("could not wake the tenant")
		c.Close()
		w.Close()
	}
	// The spec follows: the tenant is resumed, as `sqlkube tenant resume`
	// would.
	patch := []byte(`{"spec":{"suspended":false}}`)
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := h.tenants.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	})
}

// start runs tenant t's control plane in sl unless it runs already, on l
// (nil: its port, opened now).
func (h *Host) start(ctx context.Context, t *Tenant, sl *slot, token string, l net.Listener) (*instance, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.in != nil {
		if l != nil {
			l.Close()
		}
		return sl.in, nil
	}
	if sl.moving {
		if l != nil {
			l.Close()
		}
		return nil, fmt.Errorf("tenant %s is moving", t.Name)
	}
	if sl.wake != nil { // resumed by its spec: the port is ours already
		l = sl.wake.Listener
		sl.wake.detach()
		sl.wake = nil
	}
	if l == nil {
		var err error
		if l, err = h.listen(sl); err != nil {
			return nil, fmt.Errorf("listen on tenant %s's port: %w", t.Name, err)
		}
	}
	dir := h.tenantDir(t.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		l.Close()
		return nil, err
	}
	cfg := controlplane.Defaults()
	cfg.DataDir, cfg.BindAddress, cfg.Advertise = dir, h.cfg.BindAddress, h.cfg.Advertise
	cfg.TLSSANs = []string{h.cfg.EndpointHost}
	cfg.KubeconfigServer = h.endpoint(sl.port)
	cfg.Token, cfg.RandomToken = token, true
	cfg.DNS.Disable, sl.dnsPort = true, 0
	if !h.cfg.DisableDNS {
		if port, err := h.dnsPort(sl.port); err != nil {
			h.cfg.Log.Warn().Err(err).Str("tenant", t.Name).Msg("the tenant serves no cluster DNS")
		} else {
			cfg.DNS.Disable, cfg.DNS.Port, cfg.DNS.AwaitNode, sl.dnsPort = false, port, true, port
		}
	}
	// Kubernetes' metrics are the process's: a tenant's /metrics would
	// show every tenant's requests and resources. Off until the host
	// serves per-tenant figures.
	cfg.NoMetrics = true
	// Each watch cache wakes every 10 s, not every second, to hand
	// bookmarks to the watches the fan-out passes it (rarely any): ~70
	// fewer wakeups a second per idle tenant.
	cfg.WatchCacheBookmarkTick = BookmarkTick
	comps := h.cfg.Components
	if comps == nil {
		comps = controlplane.DefaultComponents()
	}
	c := *comps
	c.Elector = h.components // no Leases of the tenant's own (Run)
	cfg.Components = &c
	cfg.FakeNodes = h.cfg.FakeNodes
	opts, err := h.place(ctx, t.Name, sl)
	if err != nil {
		l.Close()
		return nil, err
	}
	opts.QuotaBytes = h.quotaBytes(t)
	name := t.Name
	// A NOSPACE alarm shows in the Tenant's status (applyQuota).
	opts.OnAlarm = func(sqlstore.Alarm) { h.queue.Add(name) }
	log := h.cfg.Log.With().Str("tenant", t.Name).Logger()
	opts.Logger = log
	opts.Registerer = h.cfg.Metrics.storeRegisterer(t.Name)
	cfg.WrapHandler = h.cfg.Metrics.wrap(t.Name)
	in := runInstance(context.WithoutCancel(ctx), t.Name, opts, cfg, l, log)
	sl.in = in
	go func() {
		select {
		case <-in.ready:
			log.Info().Str("endpoint", h.endpoint(sl.port)).Msg("tenant serving")
			h.cfg.Metrics.setRunning(name, true)
		case <-in.done:
		}
		h.queue.Add(name)
		<-in.done
		h.cfg.Metrics.setRunning(name, false)
		h.queue.Add(name)
	}()
	return in, nil
}

// standby is reconcile on a host that does not hold LeaseName: it serves
// tenant t's API beside the leading host's while t is Ready where this
// host finds its data (a PostgreSQL datastore both hosts share), and
// changes nothing else: no status, no Secret, no data. The tenant's
// controllers do not run here (the Gate is closed). When the leading
// host suspends, moves or deletes t, this host stops serving it, and a
// move fences the old copy first (Shared.Fence), so a write this host
// still takes is refused, never lost.
func (h *Host) standby(ctx context.Context, t *Tenant) (time.Duration, error) {
	ds := h.datastore(t.Status.Datastore)
	serve := t.DeletionTimestamp == nil && t.Status.Phase == PhaseReady && !t.Spec.Suspended && t.Status.Port != 0 &&
		(t.Spec.Datastore == "" || t.Spec.Datastore == t.Status.Datastore) && ds != nil
	if !serve {
		if staleStandby && h.running(t.Name) {
			return 0, nil // tests: a standby that has not seen the change
		}
		h.drop(t.Name)
		return 0, nil
	}
	sl := h.slot(t.Name, t.Status.Port)
	h.mu.Lock()
	in, checked := sl.in, sl.checked
	h.mu.Unlock()
	if in != nil {
		select {
		case <-in.done: // stopped: again in a while
			h.forget(sl, in)
			return 5 * time.Second, nil
		default:
			return 0, nil
		}
	}
	if !checked {
		// Never a new empty cluster: a SQLite tenant's file is on the
		// leading host's machine, not here.
		ok, err := h.hasData(ctx, ds, t.Name)
		if err != nil || !ok {
			return 0, err
		}
	}
	token, err := h.readToken(ctx, t.Name)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	sl.datastore, sl.provisioned, sl.checked = ds.Name, ds.Name, true // provisioned by the leading host
	h.mu.Unlock()
	if _, err := h.start(ctx, t, sl, token, nil); err != nil {
		return 0, err
	}
	return 0, nil
}

// forget clears sl's instance if it is in (which has stopped).
func (h *Host) forget(sl *slot, in *instance) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.in == in {
		sl.in = nil
	}
}

// running reports whether tenant name's control plane runs here.
func (h *Host) running(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	sl := h.slots[name]
	return sl != nil && sl.in != nil
}

// remove deletes tenant t: its control plane, data and Secrets, then
// its finalizer.
func (h *Host) remove(ctx context.Context, t *Tenant) error {
	if !hasFinalizer(t) {
		h.drop(t.Name)
		return nil
	}
	if t.Status.Phase != PhaseDeleting {
		if err := h.setStatus(ctx, t, func(s *Status) { s.Phase, s.Message = PhaseDeleting, "" }); err != nil {
			return err
		}
		crashPoint(CrashAfterDeleting, t.Name)
	}
	h.drop(t.Name)
	h.cfg.Metrics.forget(t.Name)
	crashPoint(CrashAfterStop, t.Name)
	if err := h.dropData(ctx, t); err != nil {
		return err
	}
	crashPoint(CrashAfterDropData, t.Name)
	if err := os.RemoveAll(h.tenantDir(t.Name)); err != nil {
		return err
	}
	crashPoint(CrashAfterRemoveFiles, t.Name)
	for _, s := range []string{t.Name + "-kubeconfig", t.Name + "-token"} {
		if err := h.cs.CoreV1().Secrets(Namespace).Delete(ctx, s, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	crashPoint(CrashBeforeFinalizer, t.Name)
	fresh, err := h.get(t.Name)
	if err != nil || fresh == nil {
		return err
	}
	var keep []string
	for _, f := range fresh.Finalizers {
		if f != Finalizer {
			keep = append(keep, f)
		}
	}
	fresh.Finalizers = keep
	h.cfg.Log.Info().Str("tenant", t.Name).Msg("tenant deleted with its data")
	return h.update(ctx, fresh)
}

// ensureToken is tenant t's cluster token, made the first time.
func (h *Host) ensureToken(ctx context.Context, t *Tenant) (string, error) {
	token, err := h.readToken(ctx, t.Name)
	if err == nil || !apierrors.IsNotFound(err) {
		return token, err
	}
	if t.Spec.RestoreFrom != nil && t.Status.Datastore == "" {
		return "", nil // the backup's, made with its data (restore)
	}
	if token, err = identity.NewToken(); err != nil {
		return "", err
	}
	return h.createToken(ctx, t, token)
}

// createToken stores token as tenant t's, unless it has one already,
// which it returns.
func (h *Host) createToken(ctx context.Context, t *Tenant, token string) (string, error) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: t.Name + "-token", Namespace: Namespace, OwnerReferences: owner(t)},
		Data:       map[string][]byte{"token": []byte(token)},
	}
	if _, err := h.cs.CoreV1().Secrets(Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return h.readToken(ctx, t.Name)
		}
		return "", err
	}
	return token, nil
}

func (h *Host) readToken(ctx context.Context, name string) (string, error) {
	s, err := h.cs.CoreV1().Secrets(Namespace).Get(ctx, name+"-token", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return string(s.Data["token"]), nil
}

func owner(t *Tenant) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: Group + "/" + Version, Kind: Kind, Name: t.Name, UID: t.UID}}
}

// ensureKubeconfig keeps tenant t's admin kubeconfig in its Secret.
func (h *Host) ensureKubeconfig(ctx context.Context, t *Tenant, sv *controlplane.Serving) (string, error) {
	name := t.Name + "-kubeconfig"
	if sv == nil || sv.Kubeconfig == "" {
		return "", errors.New("the tenant has no admin kubeconfig")
	}
	data, err := os.ReadFile(sv.Kubeconfig)
	if err != nil {
		return "", err
	}
	secrets := h.cs.CoreV1().Secrets(Namespace)
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, OwnerReferences: owner(t)},
			Data:       map[string][]byte{"kubeconfig": data},
		}, metav1.CreateOptions{})
		return name, err
	case err != nil:
		return "", err
	case string(cur.Data["kubeconfig"]) == string(data):
		return name, nil
	}
	cur.Data = map[string][]byte{"kubeconfig": data}
	_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	return name, err
}

// update writes t's metadata and spec.
func (h *Host) update(ctx context.Context, t *Tenant) error {
	u, err := ToUnstructured(t)
	if err != nil {
		return err
	}
	_, err = h.tenants.Update(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return nil // a newer version is queued
	}
	return err
}

// setStatus changes t's status with f and writes it if it changed.
func (h *Host) setStatus(ctx context.Context, t *Tenant, f func(*Status)) error {
	before, _ := json.Marshal(t.Status)
	f(&t.Status)
	t.Status.ObservedGeneration = t.Generation
	after, _ := json.Marshal(t.Status)
	if string(before) == string(after) {
		return nil
	}
	u, err := ToUnstructured(t)
	if err != nil {
		return err
	}
	_, err = h.tenants.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version is queued
	}
	return err
}
