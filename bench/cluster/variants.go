package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sqlkube/sqlkube/election"
	"github.com/sqlkube/sqlkube/scheduler"
)

// RaisedQPS are the client flags that take the client-side rate limit out
// of the way (sqlkube server gives its in-process scheduler the same).
var RaisedQPS = []string{"--kube-api-qps=" + strconv.Itoa(raisedQPS), "--kube-api-burst=" + strconv.Itoa(raisedBurst)}

const raisedQPS, raisedBurst = 5000, 10000

// Setup names the binaries a run uses.
type Setup struct {
	// Sqlkube is the sqlkube binary (the server runs from it).
	Sqlkube string
	// KubeBinDir holds kube-controller-manager and kube-scheduler.
	KubeBinDir string
	// TempDir is where each run's data directory goes (default: os.TempDir).
	TempDir string
	// Keep leaves each run's data directory (and the logs in it).
	Keep bool
	// ServerArgs are extra flags for every server the runs start.
	ServerArgs []string
	// ServerCPUProfile, if set, has each deployment run take a CPU profile
	// of the server (through its --pprof-address) over ProfileSeconds from
	// the Deployment's create, into ServerCPUProfile.VARIANT (each run
	// overwrites the last).
	ServerCPUProfile string
	ProfileSeconds   int
}

func (s Setup) server(ctx context.Context, args ...string) (*Server, func(), error) {
	dir, err := os.MkdirTemp(s.TempDir, "sqlkube-bench-")
	if err != nil {
		return nil, nil, err
	}
	// Simulated nodes need no pod CIDRs, and the default cluster CIDR
	// (a /16 in /24s) has room for 256 nodes only: beyond those the
	// node-ipam controller would retry, and record an event, for every
	// other node.
	all := append(append([]string{"--cluster-cidr="}, args...), s.ServerArgs...)
	var pprofAddr string
	if s.ServerCPUProfile != "" {
		if pprofAddr, err = freeLoopbackAddress(); err != nil {
			return nil, nil, err
		}
		all = append(all, "--pprof-address="+pprofAddr)
	}
	srv, err := StartServer(ctx, s.Sqlkube, dir, all...)
	if err != nil {
		return nil, nil, err
	}
	srv.PprofAddress = pprofAddr
	return srv, func() {
		_ = srv.Stop()
		if !s.Keep {
			os.RemoveAll(dir)
		}
	}, nil
}

// DeploymentVariants are the control planes of the deployment benchmark:
// "sqlkube" (sqlkube server's own controllers and scheduler), "upstream"
// (sqlkube server --controllers=-* --disable-scheduler with
// kube-controller-manager and kube-scheduler at their default client
// rates), "upstream-qps" (the same with RaisedQPS) and "sqlkube-split"
// (the same layout with `sqlkube controller-manager` and `sqlkube
// scheduler` processes, RaisedQPS: sqlkube's code, upstream's process
// layout).
var DeploymentVariants = []string{"sqlkube", "upstream", "upstream-qps", "sqlkube-split"}

// RunDeploymentVariant runs RunDeployment once against variant on a new
// server with nodes simulated nodes.
func (s Setup) RunDeploymentVariant(ctx context.Context, variant string, nodes, replicas int) (DeploymentResult, error) {
	args := []string{"--fake-nodes", fmt.Sprint(nodes)}
	var extra []string
	switch variant {
	case "sqlkube":
	case "upstream", "upstream-qps", "sqlkube-split":
		args = append(args, "--controllers=-*", "--disable-scheduler")
		if variant != "upstream" {
			extra = RaisedQPS
		}
	default:
		return DeploymentResult{}, fmt.Errorf("cluster: unknown deployment variant %q (want one of %s)", variant, strings.Join(DeploymentVariants, ", "))
	}
	srv, stop, err := s.server(ctx, args...)
	if err != nil {
		return DeploymentResult{}, err
	}
	defer stop()
	if variant != "sqlkube" {
		for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
			start := srv.Upstream
			if variant == "sqlkube-split" {
				start = srv.sqlkubeComponent
			}
			p, err := start(s.KubeBinDir, name, extra...)
			if err != nil {
				return DeploymentResult{}, err
			}
			defer p.Stop()
		}
	}
	cfg, err := srv.RESTConfig()
	if err != nil {
		return DeploymentResult{}, err
	}
	pid := srv.Pid()
	var cpu0, cpu1 time.Duration
	var profile <-chan error
	r, err := RunDeployment(ctx, cfg, nodes, replicas, func(phase string) {
		switch phase {
		case "create":
			if s.ServerCPUProfile != "" {
				profile = srv.CPUProfile(ctx, s.ServerCPUProfile+"."+variant, s.ProfileSeconds)
			}
			cpu0, _ = CPUTime(pid)
		case "running":
			cpu1, _ = CPUTime(pid)
		}
	})
	r.ServerCPU = cpu1 - cpu0
	if profile != nil {
		if perr := <-profile; perr != nil && err == nil {
			err = perr
		}
	}
	return r, err
}

// SchedulerVariants are the schedulers of the scheduling benchmark:
// "sqlkube-server" (the scheduler sqlkube server runs in its own
// process, over its in-memory loopback, as users run it), "sqlkube"
// (sqlkube's scheduler package run inside the bench process, over HTTPS
// with the server's admin kubeconfig and RaisedQPS), "sqlkube-process"
// (`sqlkube scheduler`, its own process, with RaisedQPS: sqlkube's code in
// kube-scheduler's process layout), "kube-scheduler" (the binary at its
// default client rate: 50 QPS, burst 100) and "kube-scheduler-qps" (with
// RaisedQPS).
var SchedulerVariants = []string{"sqlkube-server", "sqlkube", "sqlkube-process", "kube-scheduler", "kube-scheduler-qps"}

// schedulerGate is the namespace of the in-server scheduler's Lease in
// the sqlkube-server variant. It does not exist while the bench creates
// the nodes and pods, so the scheduler's leader election cannot create
// its Lease and the scheduler does not start; creating the namespace
// lets it win at its next retry (kube-scheduler's default retry period,
// 2 s), as a standby scheduler takes over.
const schedulerGate = "bench-scheduler-gate"

// SchedulingOptions are one run of the scheduling benchmark.
type SchedulingOptions struct {
	Nodes, Pods int
	Shape       PodOptions
	// Timeout bounds the wait for every pod to be bound (the result is
	// then of the pods bound by then).
	Timeout time.Duration
	// NoDefaultSpread runs every variant with a configuration whose
	// PodTopologySpread has defaultingType List and no
	// defaultConstraints: pods get no system default spreading, and
	// the scheduler may place them in batches (opportunistic batching
	// leaves pods with default constraints out).
	NoDefaultSpread bool
	// OnStart and OnStop run around the scheduler (a CPU profile).
	OnStart, OnStop func()
}

// SchedulingResult is one run of RunSchedulingVariant.
type SchedulingResult struct {
	Throughput
	Bound int
	// Setup is how long creating the nodes and pods took.
	Setup time.Duration
	// Placement is where the bound pods went.
	Placement Placement
	// CPU time used from the scheduler's start until all pods were bound
	// (or the timeout): by the server process (which runs the scheduler
	// in the sqlkube-server variant), by the scheduler's own process (0
	// when it has none), and by this bench process (which runs the
	// scheduler in the sqlkube variant, and counts the bound pods).
	ServerCPU, SchedulerCPU, BenchCPU time.Duration
}

// RunSchedulingVariant starts sqlkube server with only the API
// (--controllers=-* --disable-scheduler), creates the nodes and the
// unbound pods, then starts the scheduler and samples the bound pods
// every second until all are bound.
func (s Setup) RunSchedulingVariant(ctx context.Context, variant string, o SchedulingOptions) (SchedulingResult, error) {
	var r SchedulingResult
	if !containsString(SchedulerVariants, variant) {
		return r, fmt.Errorf("cluster: unknown scheduler variant %q (want one of %s)", variant, strings.Join(SchedulerVariants, ", "))
	}
	serverArgs := []string{"--controllers=-*", "--disable-scheduler"}
	if variant == "sqlkube-server" {
		gated, cleanup, err := s.gatedSchedulerArgs(o.NoDefaultSpread)
		if err != nil {
			return r, err
		}
		defer cleanup()
		serverArgs = append([]string{"--controllers=-*"}, gated...)
	}
	srv, stop, err := s.server(ctx, serverArgs...)
	if err != nil {
		return r, err
	}
	defer stop()
	cfg, err := srv.RESTConfig()
	if err != nil {
		return r, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	begin := time.Now()
	if err := CreateNodes(ctx, cs, o.Nodes); err != nil {
		return r, fmt.Errorf("cluster: creating nodes: %w", err)
	}
	if err := CreatePods(ctx, cs, o.Pods, o.Shape); err != nil {
		return r, fmt.Errorf("cluster: creating pods: %w", err)
	}
	r.Setup = time.Since(begin)
	pods, err := WatchPods(ctx, cs, SchedulingNamespace)
	if err != nil {
		return r, err
	}
	// The scheduler's flags beyond the kubeconfig's. With --config a
	// scheduler takes its client settings from the file, not the flags.
	raised := variant != "kube-scheduler"
	var args []string
	if raised {
		args = RaisedQPS
	}
	if o.NoDefaultSpread {
		path := filepath.Join(srv.DataDir, "scheduler-no-default-spread.yaml")
		if err := os.WriteFile(path, []byte(noDefaultSpreadConfig(srv.Kubeconfig, raised, "")), 0o600); err != nil {
			return r, err
		}
		args = []string{"--config", path}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	schedPid := 0
	serverCPU0, _ := CPUTime(srv.Pid())
	benchCPU0, _ := CPUTime(os.Getpid())
	start := time.Now()
	if o.OnStart != nil {
		o.OnStart()
	}
	switch variant {
	case "sqlkube-server":
		if _, bound, _ := pods.Counts(); bound != 0 {
			return r, fmt.Errorf("cluster: %d pods were bound before the in-server scheduler's gate opened", bound)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: schedulerGate}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return r, fmt.Errorf("cluster: opening the scheduler's gate: %w", err)
		}
	case "sqlkube":
		done := make(chan error, 1)
		if err := startSqlkubeScheduler(runCtx, srv.Kubeconfig, args, done); err != nil {
			return r, err
		}
		defer func() { cancel(); <-done }()
	default:
		start := srv.Upstream
		if variant == "sqlkube-process" {
			start = srv.sqlkubeComponent
		}
		p, err := start(s.KubeBinDir, "kube-scheduler", args...)
		if err != nil {
			return r, err
		}
		defer p.Stop()
		schedPid = p.Pid()
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, o.Timeout)
	defer cancelWait()
	r.Throughput, r.Bound = pods.SampleBound(waitCtx, start, o.Pods)
	serverCPU1, _ := CPUTime(srv.Pid())
	benchCPU1, _ := CPUTime(os.Getpid())
	r.ServerCPU, r.BenchCPU = serverCPU1-serverCPU0, benchCPU1-benchCPU0
	if schedPid != 0 {
		r.SchedulerCPU, _ = CPUTime(schedPid)
	}
	if o.OnStop != nil {
		o.OnStop()
	}
	r.Placement, err = PlacementOf(ctx, cs, SchedulingNamespace, o.Nodes)
	return r, err
}

// gatedSchedulerArgs are the sqlkube server flags of the sqlkube-server
// variant: its in-process scheduler elects through a Lease in
// schedulerGate's namespace (and, with noDefaultSpread, takes the same
// configuration as the other variants). cleanup removes the
// configuration file.
func (s Setup) gatedSchedulerArgs(noDefaultSpread bool) (args []string, cleanup func(), err error) {
	if !noDefaultSpread {
		return []string{"--kube-scheduler-arg=--leader-elect-resource-namespace=" + schedulerGate}, func() {}, nil
	}
	f, err := os.CreateTemp(s.TempDir, "sqlkube-bench-scheduler-*.yaml")
	if err != nil {
		return nil, nil, err
	}
	_, err = f.WriteString(noDefaultSpreadConfig("", true, schedulerGate))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, nil, err
	}
	return []string{"--kube-scheduler-arg=--config=" + f.Name()}, func() { os.Remove(f.Name()) }, nil
}

// noDefaultSpreadConfig is a KubeSchedulerConfiguration with the client
// settings the flags would give (RaisedQPS's rate when raised, else the
// defaults), leader election off (or, given leaseNamespace, on with its
// Lease there) and PodTopologySpread without system default constraints.
func noDefaultSpreadConfig(kubeconfig string, raised bool, leaseNamespace string) string {
	client := ""
	if kubeconfig != "" {
		client = fmt.Sprintf("  kubeconfig: %q\n", kubeconfig)
	}
	if raised {
		client += fmt.Sprintf("  qps: %d\n  burst: %d\n", raisedQPS, raisedBurst)
	}
	election := "  leaderElect: false\n"
	if leaseNamespace != "" {
		election = fmt.Sprintf("  leaderElect: true\n  resourceNamespace: %q\n", leaseNamespace)
	}
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
` + client + `leaderElection:
` + election + `profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints: []
`
}

// startSqlkubeScheduler runs sqlkube's scheduler package in this process
// until ctx ends; done receives its result.
func startSqlkubeScheduler(ctx context.Context, kubeconfig string, args []string, done chan<- error) error {
	o := scheduler.NewOptions()
	if err := o.Parse(append([]string{"--kubeconfig", kubeconfig, "--leader-elect=false"}, args...)); err != nil {
		return err
	}
	sc, err := o.Config()
	if err != nil {
		return err
	}
	cfg, err := o.RESTConfig(sc)
	if err != nil {
		return err
	}
	go func() {
		err := scheduler.Run(ctx, cfg, sc, election.Policy{}, nil)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		done <- err
	}()
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// KubeBinaries reports whether dir holds the named executables.
func KubeBinaries(dir string, names ...string) error {
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil || st.Mode()&0o111 == 0 {
			return fmt.Errorf("cluster: %s not found in %q (build it: go build -o %s k8s.io/kubernetes/cmd/%s)", n, dir, filepath.Join(dir, n), n)
		}
	}
	return nil
}
