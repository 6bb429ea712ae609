package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sqlkube/sqlkube/controlplane"
	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/internal/queuemetrics"
	"github.com/sqlkube/sqlkube/storage"
	"github.com/sqlkube/sqlkube/tenant"
)

// hostFlags configure `sqlkube host`.
type hostFlags struct {
	dataDir     string
	datastore   string
	bindAddress string
	securePort  int
	tenantPorts string
	token       string
	tokenFile   string
	dnsPorts    string
	disableDNS  bool
	tenantBind  string
	tenantHost  string
	advertise   string
	quota       int64
	fakeNodes   int
	pprof       string
	tenantDS    []string
	defaultDS   string
	backupDir   string
	maxConns    int
}

// newHostCommand is `sqlkube host`: a control plane whose API serves
// Tenant objects, and the tenant clusters they ask for, in one process.
func newHostCommand(lf *logFlags) *cobra.Command {
	f := &hostFlags{}
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Host many tenant clusters in one process, managed as Tenant objects (tenants.sqlkube.io) on the host's own API",
		Long: "Host many tenant clusters in one process. The host serves its own Kubernetes API (its admin kubeconfig is\n" +
			"DATA_DIR/kubeconfig), where Tenant objects (kubectl, or `sqlkube tenant`) ask for clusters; each tenant is a whole\n" +
			"cluster (identity, API endpoint on a port of --tenant-ports, controllers, scheduler, data of its own).\n\n" +
			"A tenant's data is in one of the host's datastores: \"sqlite\" (a SQLite file each under DATA_DIR/tenants), or a\n" +
			"PostgreSQL database given with --tenant-datastore [NAME=]postgres://… (a schema and a role each). A Tenant's\n" +
			"spec.datastore names one; changing it moves the tenant (`sqlkube tenant move`). TenantBackup objects (`sqlkube\n" +
			"tenant backup`) write backups to --tenant-backup-dir, which a new Tenant's spec.restoreFrom restores.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := stderrLogger(lf)
			if err != nil {
				return err
			}
			return runHost(cmd.Context(), f, log, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "./sqlkube-host", "directory for the host's database, certificates and admin kubeconfig, and the tenants' files (tenants/NAME)")
	fl.StringVar(&f.datastore, "datastore", "", "the host's datastore DSN, where Tenant objects are kept (default: sqlite://DATA_DIR/host.db)")
	fl.StringVar(&f.token, "token", "", "the host API's cluster token (default: DATA_DIR/token, made by the first host); a second host on the same --datastore (HA) needs the first one's")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the host API's cluster token (instead of --token)")
	fl.StringVar(&f.bindAddress, "bind-address", "127.0.0.1", "address of the host's API")
	fl.IntVar(&f.securePort, "secure-port", 6443, "port of the host's API (0: any free port)")
	fl.StringVar(&f.tenantPorts, "tenant-ports", "7000-7999", "ports tenants' APIs take, one each (MIN-MAX; 0: any free port)")
	fl.StringVar(&f.dnsPorts, "tenant-dns-ports", "", "ports tenants' cluster DNS takes on --advertise-address, UDP and TCP, at the offset of their API ports (MIN-MAX, as long as --tenant-ports; 0: any free port; default: --tenant-ports' range 1000 higher). A tenant serves DNS once it has a node that is not simulated")
	fl.BoolVar(&f.disableDNS, "disable-tenant-dns", false, "tenants serve no cluster DNS")
	fl.StringVar(&f.tenantBind, "tenant-bind-address", controlplane.DefaultBindAddress, "address tenants' APIs listen on")
	fl.StringVar(&f.tenantHost, "tenant-endpoint-host", "", "host name or address in tenants' endpoints and kubeconfigs (default: the loopback address when --tenant-bind-address is every address)")
	fl.StringVar(&f.advertise, "advertise-address", "", "address tenants' kubernetes Services name, which their pods reach them at (default: the host's)")
	fl.Int64Var(&f.quota, "quota-backend-bytes", 0, "a tenant's datastore quota unless its spec gives one, as etcd's flag (0: 2 GiB; negative: none)")
	fl.IntVar(&f.fakeNodes, "tenant-fake-nodes", 0, "simulated nodes in each tenant (testing)")
	fl.StringArrayVar(&f.tenantDS, "tenant-datastore", nil, "[NAME=]postgres://…: a PostgreSQL database that holds tenants, a schema and a role of its own each, on one bounded pool; repeat it with names for more (a Tenant's spec.datastore names one; without a name it is \"default\", and the default). \"sqlite\", a SQLite file each under DATA_DIR/tenants, is always one")
	fl.StringVar(&f.defaultDS, "tenant-default-datastore", "", "the datastore of tenants whose spec names none (default: the unnamed --tenant-datastore, else sqlite)")
	fl.StringVar(&f.backupDir, "tenant-backup-dir", "", "where TenantBackups' files are written (default: DATA_DIR/backups)")
	fl.IntVar(&f.maxConns, "tenant-datastore-max-conns", sqlstore.DefaultSharedMaxConns, "connections to each --tenant-datastore in all, its LISTEN one included, whatever the number of tenants")
	fl.StringVar(&f.pprof, "pprof-address", "", "serve net/http/pprof here (debugging)")
	_ = fl.MarkHidden("pprof-address")
	return cmd
}

// tenantDatastoreOpened, if set, is given --tenant-datastore's handle
// once it is open (tests count the tenants' transactions on it).
var tenantDatastoreOpened func(*sqlstore.Shared)

// parseTenantDatastore splits a --tenant-datastore value into its name
// ("": the unnamed one) and DSN: NAME=DSN when what comes before the
// first '=' is a datastore's name (a DSN's own '=' come after its "://").
func parseTenantDatastore(s string) (name, dsn string) {
	if n, d, ok := strings.Cut(s, "="); ok && !strings.Contains(n, "://") && tenant.ValidDatastoreName(n) == "" {
		return n, d
	}
	return "", s
}

func parsePortRange(flag, s string) (int, int, error) {
	if s == "0" {
		return 0, 0, nil
	}
	lo, hi, ok := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || a <= 0 || b < a || b > 65535 {
		return 0, 0, fmt.Errorf("%s %q: want MIN-MAX, 1-65535", flag, s)
	}
	return a, b, nil
}

func runHost(ctx context.Context, f *hostFlags, log zerolog.Logger, out io.Writer) error {
	pmin, pmax, err := parsePortRange("--tenant-ports", f.tenantPorts)
	if err != nil {
		return err
	}
	ports := pmax - pmin + 1
	if pmin == 0 {
		ports = 1000 // any free port: as many tenants as the default range holds
	}
	ensureInotifyInstances(ports, log)
	// Nothing serves the tenants' work-queue metrics, and each queue
	// that keeps them wakes twice a second: off for the process.
	if !queuemetrics.Off() {
		log.Warn().Msg("work-queue metrics could not be turned off: each tenant's controllers' queues wake twice a second to update them")
	}
	// Kubernetes' watch caches check themselves against the datastore
	// every 5 to 7.5 minutes (DetectCacheInconsistency, on since 1.34):
	// a whole list of each resource, periodic SQL an idle tenant must
	// not do (for 100 tenants some 20 lists a second), and a timer per
	// resource. Off in a host.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.DetectCacheInconsistency): false}); err != nil {
		log.Warn().Err(err).Msg("the watch caches' consistency check could not be turned off: every tenant lists each of its resources every few minutes")
	}
	dmin, dmax := 0, 0
	switch {
	case f.dnsPorts != "":
		if dmin, dmax, err = parsePortRange("--tenant-dns-ports", f.dnsPorts); err != nil {
			return err
		}
	case pmin != 0:
		if dmin, dmax = pmin+1000, pmax+1000; dmax > 65535 {
			return fmt.Errorf("--tenant-ports %s: give --tenant-dns-ports (the default, 1000 higher, passes 65535)", f.tenantPorts)
		}
	}
	if f.pprof != "" {
		stopPprof, err := servePprof(f.pprof)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	ctx, stop := signalContext(ctx)
	defer stop()
	start := time.Now()
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("create --data-dir: %w", err)
	}
	dsn := f.datastore
	if dsn == "" {
		dsn = "sqlite://" + filepath.Join(f.dataDir, "host.db")
	}
	store, err := sqlstore.Open(ctx, sqlstore.Options{DSN: dsn, Logger: log})
	if err != nil {
		return err
	}
	defer store.Close()
	etcd := etcdshim.New(etcdshim.Options{Backend: store, Logger: log, ClusterKey: store.Describe()})
	defer etcd.Stop(5 * time.Second)
	client := storage.Local(etcd)
	defer client.Close()

	cfg := controlplane.Defaults()
	cfg.DataDir, cfg.BindAddress, cfg.SecurePort = f.dataDir, f.bindAddress, f.securePort
	cfg.Token, cfg.TokenFile = f.token, f.tokenFile
	cfg.DNS.Disable = true
	// As its tenants', the host API's watch caches hand bookmarks to the
	// few watches they serve every 10 s, not every second.
	cfg.WatchCacheBookmarkTick = tenant.BookmarkTick
	cfg.Log, cfg.Out = log, out
	if err := controlplane.EstablishIdentity(ctx, client.KV, &cfg); err != nil {
		return err
	}
	hostLog := log.With().Str("component", "tenant-host").Logger()
	identity, err := hostIdentity(f.dataDir)
	if err != nil {
		return err
	}
	hcfg := tenant.HostConfig{
		DataDir: f.dataDir, BindAddress: f.tenantBind, EndpointHost: f.tenantHost, Advertise: f.advertise,
		PortMin: pmin, PortMax: pmax, DNSPortMin: dmin, DNSPortMax: dmax, DisableDNS: f.disableDNS, QuotaBytes: f.quota, Log: hostLog, FakeNodes: f.fakeNodes,
		Metrics: tenant.NewMetrics(), DefaultDatastore: f.defaultDS, BackupDir: f.backupDir, Identity: identity,
	}
	seen := map[string]string{} // database -> the datastore that names it
	for _, v := range f.tenantDS {
		name, dsn := parseTenantDatastore(v)
		if name == tenant.DefaultDatastore {
			name = "" // the unnamed one's name
		}
		flag := "--tenant-datastore " + cmp.Or(name, tenant.DefaultDatastore)
		shared, err := sqlstore.NewShared(ctx, dsn, sqlstore.SharedOptions{MaxConns: f.maxConns, Logger: hostLog.With().Str("datastore", name).Logger()})
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		defer shared.Close() // after the tenants' stores (tenantsDone below)
		// Its connections, on the host's /metrics (pool="shared",
		// datastore=NAME).
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"datastore": cmp.Or(name, tenant.DefaultDatastore)}, hcfg.Metrics.Registry).Register(shared.Collector()); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		// Two names for one database would make a move drop the data it
		// moved.
		id, err := shared.DatabaseID(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		if other, dup := seen[id]; dup {
			return fmt.Errorf("--tenant-datastore %s and %s name the same database", other, cmp.Or(name, tenant.DefaultDatastore))
		}
		seen[id] = cmp.Or(name, tenant.DefaultDatastore)
		switch {
		case name == "" && hcfg.Shared != nil:
			return errors.New("--tenant-datastore: one may be unnamed, the others are NAME=DSN")
		case name == "":
			hcfg.Shared = shared
			if tenantDatastoreOpened != nil {
				tenantDatastoreOpened(shared)
			}
		default:
			hcfg.Datastores = append(hcfg.Datastores, tenant.Datastore{Name: name, Shared: shared})
		}
	}
	// The host's /metrics serves the tenants' figures, labelled by tenant.
	if cfg.Metrics != nil {
		cfg.Metrics = prometheus.Gatherers{cfg.Metrics, hcfg.Metrics.Registry}
	} else {
		cfg.Metrics = hcfg.Metrics.Registry
	}
	// The tenants stop before the host's API, through which the host
	// lets go of its Lease (tenant.Host.Run): a host started again at
	// once runs its tenants' controllers at once.
	tenantsCtx, stopTenants := context.WithCancel(ctx)
	defer stopTenants()
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	serving := make(chan controlplane.Serving, 1)
	cfg.Serving = func(sv controlplane.Serving) { serving <- sv }
	tenantsDone := make(chan struct{})
	go func() {
		defer close(tenantsDone)
		var sv controlplane.Serving
		select {
		case <-tenantsCtx.Done():
			return
		case sv = <-serving:
		}
		rc, err := clientcmd.BuildConfigFromFlags("", sv.Kubeconfig)
		if err == nil {
			err = tenant.Install(tenantsCtx, rc)
		}
		var h *tenant.Host
		if err == nil {
			h, err = tenant.NewHost(hcfg, rc)
		}
		if err == nil {
			fmt.Fprintf(out, "Tenants: sqlkube tenant create NAME --kubeconfig %s\n", sv.Kubeconfig)
			err = h.Run(tenantsCtx)
		}
		if err != nil && tenantsCtx.Err() == nil {
			log.Error().Err(err).Msg("the tenant host stopped; the host's API goes on")
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			<-tenantsDone
			stopAPI()
		case <-apiCtx.Done():
		}
	}()
	err = controlplane.Serve(apiCtx, &cfg, client, store.Describe(), start)
	stopTenants()
	<-tenantsDone
	return err
}

// hostIdentity is this host's identity in the election of the tenants'
// host Lease, kept in DATA_DIR/host-identity: made once, so a host
// started again on its directory (after a crash, say) takes its Lease
// back at once. Two hosts have two directories, so two identities.
func hostIdentity(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "host-identity")
	b, err := os.ReadFile(path)
	if err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	id := election.DefaultIdentity()
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the host's identity: %w", err)
	}
	return id, nil
}

// inotifyPerTenant is how many inotify instances a tenant holds:
// Kubernetes' CSR signing controller watches the files of its four
// signers, an instance each.
const inotifyPerTenant = 4

// inotifyLimit is where the user's inotify instances are bounded (128 by
// default).
var inotifyLimit = "/proc/sys/fs/inotify/max_user_instances"

// ensureInotifyInstances raises fs.inotify.max_user_instances, as root,
// so that a host with as many tenants as its port range holds leaves the
// 128 that other processes of the user (a node's containerd and kubelet
// beside it) expect, as kube-proxy sets the conntrack limits it needs.
// Not root, it says what to set.
func ensureInotifyInstances(tenants int, log zerolog.Logger) {
	b, err := os.ReadFile(inotifyLimit)
	if err != nil {
		return // not Linux, or no procfs
	}
	have, err := strconv.Atoi(strings.TrimSpace(string(b)))
	want := 128 + inotifyPerTenant*tenants
	if err != nil || have >= want {
		return
	}
	if os.Geteuid() == 0 {
		if err := os.WriteFile(inotifyLimit, []byte(strconv.Itoa(want)), 0o644); err == nil {
			log.Info().Int("from", have).Int("to", want).Int("tenants", tenants).Msg("raised fs.inotify.max_user_instances: each tenant holds " + strconv.Itoa(inotifyPerTenant))
			return
		}
	}
	log.Warn().Int("have", have).Int("want", want).Msg("fs.inotify.max_user_instances is low for as many tenants as --tenant-ports holds (each holds " + strconv.Itoa(inotifyPerTenant) + "): raise it with sysctl, or processes of this user will fail to watch files")
}
