package main

import (
	stdlog "log"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// routeLogs sends the logs of the libraries sqlkube embeds to log, so a
// process's output is one stream in one format (--log-format): the
// Kubernetes libraries' (klog: informers, controllers, the kubelet) and
// the standard library's log (CoreDNS, net/http's server errors).
func routeLogs(log zerolog.Logger) {
	routeKlog(log)
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	stdlog.SetOutput(stdlogWriter{log: log.With().Str("component", "stdlog").Logger()})
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
	klog.SetLoggerWithOptions(logr.New(&klogSink{log: log.With().Str("component", "k8s").Logger(), infos: infos}), klog.ContextualLogger(true))
}

// klogSink is a logr.LogSink over zerolog.
type klogSink struct {
	log zerolog.Logger
	kv  []any
	// name is the logger's name (WithName's, joined with "/"): a
	// controller's name in kube-controller-manager.
	name string
	// infos are the messages of info lines logged at info level.
	infos []string
}

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(level int) bool {
	if level > 0 {
		return false
	}
	return s.log.GetLevel() <= zerolog.DebugLevel || len(s.infos) > 0 && s.log.GetLevel() <= zerolog.InfoLevel
}

func (s *klogSink) Info(_ int, msg string, kv ...any) {
	ev := s.log.Debug()
	if slices.Contains(s.infos, msg) {
		ev = s.log.Info()
	}
	s.event(ev).Fields(append(s.kv[:len(s.kv):len(s.kv)], kv...)).Msg(msg)
}

func (s *klogSink) Error(err error, msg string, kv ...any) {
	s.event(s.log.Warn()).Err(err).Fields(append(s.kv[:len(s.kv):len(s.kv)], kv...)).Msg(msg)
}

func (s *klogSink) event(ev *zerolog.Event) *zerolog.Event {
	if s.name != "" {
		ev = ev.Str("logger", s.name)
	}
	return ev
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	return &klogSink{log: s.log, kv: append(s.kv[:len(s.kv):len(s.kv)], kv...), name: s.name, infos: s.infos}
}

func (s *klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &klogSink{log: s.log, kv: s.kv, name: name, infos: s.infos}
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
