package main

import (
	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// routeKlog sends the logs of the Kubernetes libraries (klog: informers,
// controllers, the watch cache) to log: their info lines at debug level,
// their errors as warnings, so a server's output is one stream.
func routeKlog(log zerolog.Logger) {
	klog.SetLogger(logr.New(&klogSink{log: log.With().Str("component", "k8s").Logger()}))
}

// klogSink is a logr.LogSink over zerolog.
type klogSink struct {
	log zerolog.Logger
	kv  []any
}

func (s *klogSink) Init(logr.RuntimeInfo) {}

func (s *klogSink) Enabled(int) bool { return s.log.GetLevel() <= zerolog.DebugLevel }

func (s *klogSink) Info(_ int, msg string, kv ...any) {
	s.log.Debug().Fields(append(s.kv[:len(s.kv):len(s.kv)], kv...)).Msg(msg)
}

func (s *klogSink) Error(err error, msg string, kv ...any) {
	s.log.Warn().Err(err).Fields(append(s.kv[:len(s.kv):len(s.kv)], kv...)).Msg(msg)
}

func (s *klogSink) WithValues(kv ...any) logr.LogSink {
	return &klogSink{log: s.log, kv: append(s.kv[:len(s.kv):len(s.kv)], kv...)}
}

func (s *klogSink) WithName(name string) logr.LogSink {
	return &klogSink{log: s.log.With().Str("logger", name).Logger(), kv: s.kv}
}
