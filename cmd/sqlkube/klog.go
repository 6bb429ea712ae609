package main

import (
	"context"
	"errors"
	stdlog "log"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// routeLogs sends the logs of the libraries sqlkube embeds to log, so a
// process's output is one stream in one format (--log-format): the
// Kubernetes libraries' (klog: informers, controllers, the kubelet) and
// the standard library's log (CoreDNS, net/http's server errors).
func routeLogs(log zerolog.Logger) {
	routeKlogQuiet(log, nil, controllerQuiet)
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	stdlog.SetOutput(stdlogWriter{log: log.With().Str("component", "stdlog").Logger()})
}

// nodeCIDRRefused is the API's answer to the node-ipam controller when it
// patches a second pod CIDR onto a Node that has one.
const nodeCIDRRefused = "node updates may not change podCIDR"

// controllerQuiet are the controller manager's warnings logged at debug
// level (docs/logging.md): the node-ipam controller reads Nodes from its
// informer, and when a Node it has just given a pod CIDR comes back to
// its queue (the kubelet updated it meanwhile) before the informer holds
// its own patch, it allocates a second CIDR. The API refuses it, the
// controller releases it, and on its retry it finds the first: three
// warnings at a node's registration and nothing wrong. Kubernetes' own
// allocator does this; any other failure to patch is still a warning.
//
// And since Kubernetes 1.37 a controller that finds its informer older
// than its own last write (the ReplicaSet controller's consistency
// store) returns "read version: A is not as new as written version: B"
// and retries once the informer has caught up, which Kubernetes logs as
// an unhandled error. The in-process controllers write fast enough to
// meet it in any rollout; it is the wait working, not a fault.
var controllerQuiet = []quietLine{
	{message: "Unhandled Error", err: "is not as new as written version"},
	{message: "Failed to update node PodCIDR after multiple attempts", err: nodeCIDRRefused},
	{message: "CIDR assignment for node failed. Releasing allocated CIDR", err: nodeCIDRRefused},
	{message: "Error processing node work item", err: nodeCIDRRefused},
}

// routeKlog sends klog's logs to log: their info lines at debug level,
// but those whose message is one of infos at info level, and their
// errors as warnings. Only verbosity 0 is logged, as klog's default -v.
//
// The sink is also the contextual logger (klog.Background and
// klog.FromContext return it), so a component's logger.V(n).Enabled()
// is the sink's own check. Behind klog's default contextual logger
// every such check allocates once a logger is set, and the scheduler
// makes one per node and plugin.
func routeKlog(log zerolog.Logger, infos ...string) {
	routeKlogQuiet(log, infos, nil)
}

// routeKlogQuiet is routeKlog that also logs the error lines quiet names
// at debug level instead of as warnings (docs/logging.md lists them).
func routeKlogQuiet(log zerolog.Logger, infos []string, quiet []quietLine) {
	r := &klogRoute{infos: slices.Clone(infos), quiet: quiet}
	for _, q := range quiet {
		if q.until != "" && !slices.Contains(r.infos, q.until) {
			r.infos = append(r.infos, q.until)
		}
	}
	klog.SetLoggerWithOptions(logr.New(&klogSink{log: log.With().Str("component", "k8s").Logger(), route: r}), klog.ContextualLogger(true))
}

// quietLine is an error line of an upstream component that warns of a
// state sqlkube makes on purpose (a node's first seconds before it is
// registered, a limit a container does not let it raise): logged at debug
// level, not as a warning.
type quietLine struct {
	// message is the line's message; err, if set, a part of its error's
	// text that it must have too.
	message, err string
	// until, if set, is the message of an info line after which the
	// line is a warning again, once quietGrace has passed: the state it
	// warned of is over (the kubelet's "Successfully registered node";
	// its reads at resourceVersion 0, from the watch cache, may still
	// miss the Node for a moment).
	until string
}

// quietGrace is how long a quietLine stays quiet after its until line.
var quietGrace = 10 * time.Second

// klogRoute is what a klogSink and the loggers made from it share.
type klogRoute struct {
	// infos are the messages of info lines logged at info level.
	infos []string
	quiet []quietLine
	// seen are the messages of the info lines logged so far, with when
	// each was first logged.
	seen sync.Map
}

// isQuiet reports whether an error line is one of r.quiet's, now.
func (r *klogRoute) isQuiet(msg string, err error) bool {
	for _, q := range r.quiet {
		if q.message != msg || q.err != "" && (err == nil || !strings.Contains(err.Error(), q.err)) {
			continue
		}
		if q.until == "" {
			return true
		}
		if at, passed := r.seen.Load(q.until); !passed || time.Since(at.(time.Time)) < quietGrace {
			return true
		}
	}
	return false
}

// klogSink is a logr.LogSink over zerolog.
type klogSink struct {
	log zerolog.Logger
	kv  []any
	// name is the logger's name (WithName's, joined with "/"): a
	// controller's name in kube-controller-manager.
	name  string
	route *klogRoute
}

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(level int) bool {
	if level > 0 {
		return false
	}
	return s.log.GetLevel() <= zerolog.DebugLevel || len(s.route.infos) > 0 && s.log.GetLevel() <= zerolog.InfoLevel
}

func (s *klogSink) Info(_ int, msg string, kv ...any) {
	ev := s.log.Debug()
	if slices.Contains(s.route.infos, msg) {
		ev = s.log.Info()
		if _, ok := s.route.seen.Load(msg); !ok {
			s.route.seen.Store(msg, time.Now())
		}
	}
	s.event(ev).Fields(append(s.kv[:len(s.kv):len(s.kv)], kv...)).Msg(msg)
}

// Error logs a warning, but at debug level when err is only a cancelled
// context (the caller stopped: a component's watches as the process
// stops) or the line is one of the route's quiet ones.
func (s *klogSink) Error(err error, msg string, kv ...any) {
	ev := s.log.Warn()
	if errors.Is(err, context.Canceled) || s.route.isQuiet(msg, err) {
		ev = s.log.Debug()
	}
	s.event(ev).Err(err).Fields(append(s.kv[:len(s.kv):len(s.kv)], kv...)).Msg(msg)
}

func (s *klogSink) event(ev *zerolog.Event) *zerolog.Event {
	if s.name != "" {
		ev = ev.Str("logger", s.name)
	}
	return ev
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	return &klogSink{log: s.log, kv: append(s.kv[:len(s.kv):len(s.kv)], kv...), name: s.name, route: s.route}
}

func (s *klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &klogSink{log: s.log, kv: s.kv, name: name, route: s.route}
}

// Name is the logger's name: panics.Contain logs it with a panic.
func (s *klogSink) Name() string { return s.name }

// stdlogWriter logs the standard library's log lines, at the level their
// "[LEVEL] " prefix names (CoreDNS writes one), else as warnings.
type stdlogWriter struct{ log zerolog.Logger }

var stdlogLevels = map[string]zerolog.Level{
	"[DEBUG] ": zerolog.DebugLevel, "[INFO] ": zerolog.InfoLevel,
	"[WARNING] ": zerolog.WarnLevel, "[ERROR] ": zerolog.ErrorLevel, "[FATAL] ": zerolog.ErrorLevel,
}

func (w stdlogWriter) Write(p []byte) (int, error) {
	msg, lvl := strings.TrimRight(string(p), "\n"), zerolog.WarnLevel
	for prefix, l := range stdlogLevels {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			msg, lvl = rest, l
			break
		}
	}
	w.log.WithLevel(lvl).Msg(msg)
	return len(p), nil
}
