package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// logSome logs as a server does: its own lines, the Kubernetes libraries'
// (klog) and the standard library's (CoreDNS, net/http), through the
// logger --log-level=debug --log-format=format makes on w.
func logSome(t *testing.T, format string, w io.Writer) {
	t.Helper()
	lf := &logFlags{level: "debug", format: format}
	log, err := lf.logger(w)
	if err != nil {
		t.Fatal(err)
	}
	routeLogs(log)
	t.Cleanup(func() {
		klog.ClearLogger()
		stdlog.SetOutput(os.Stderr)
		stdlog.SetFlags(stdlog.LstdFlags)
	})
	log.Info().Str("address", "https://127.0.0.1:6443").Msg("serving Kubernetes API")
	log.Error().Err(errors.New("boom")).Msg("something failed")
	klog.InfoS("Caches are synced", "controller", "endpoints")
	klog.ErrorS(errors.New("conflict"), "Error syncing", "key", "default/web")
	stdlog.Print("[INFO] plugin/reload: Running configuration SHA512 = 1234")
	stdlog.Print("http: TLS handshake error from 127.0.0.1:5555: EOF")
}

func TestLogFormat_TextHasNoEscapesOffATerminal(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) (w *os.File, read func() string){
		"file": func(t *testing.T) (*os.File, func() string) {
			f, err := os.Create(filepath.Join(t.TempDir(), "log"))
			if err != nil {
				t.Fatal(err)
			}
			return f, func() string {
				f.Close()
				b, err := os.ReadFile(f.Name())
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
		},
		"pipe": func(t *testing.T) (*os.File, func() string) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(r)
				r.Close()
				got <- string(b)
			}()
			return w, func() string { w.Close(); return <-got }
		},
	} {
		t.Run(name, func(t *testing.T) {
			w, read := open(t)
			logSome(t, "text", w)
			out := read()
			if strings.Contains(out, "\x1b[") {
				t.Errorf("escape sequences in the log:\n%q", out)
			}
			for _, want := range []string{
				"INF serving Kubernetes API address=https://127.0.0.1:6443",
				"ERR something failed error=boom",
				"DBG Caches are synced component=k8s controller=endpoints",
				"WRN Error syncing error=conflict component=k8s key=default/web",
				"INF plugin/reload: Running configuration SHA512 = 1234 component=stdlog",
				"WRN http: TLS handshake error",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestLogFormat_JSONLines(t *testing.T) {
	var out bytes.Buffer
	logSome(t, "json", &out)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("not a JSON object: %q: %v", l, err)
			continue
		}
		if m["level"] == nil || m["message"] == nil || m["time"] == nil {
			t.Errorf("line lacks level, message or time: %q", l)
		}
	}
}

func TestLogFormat_Flag(t *testing.T) {
	for format, ok := range map[string]bool{"text": true, "json": true, "console": true, "xml": false, "": false} {
		_, err := (&logFlags{level: "info", format: format}).logger(io.Discard)
		if (err == nil) != ok {
			t.Errorf("--log-format=%q: error %v", format, err)
		}
	}
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
}

// TestRouteKlog_Infos: klog info lines whose message is one of infos come
// out at info level, with their fields and a logger's name and values;
// the others stay at debug level, below an info logger's.
func TestRouteKlog_Infos(t *testing.T) {
	var out bytes.Buffer
	log, err := (&logFlags{level: "info", format: "json"}).logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	routeKlog(log, "NodeIPs changed for the node")
	t.Cleanup(klog.ClearLogger)
	klog.InfoS("Caches are synced", "controller", "endpoints")
	klog.InfoS("NodeIPs changed for the node", "node", "n1")
	klog.Background().WithName("proxy").WithValues("ipFamily", "IPv4").Info("NodeIPs changed for the node")
	klog.V(2).InfoS("NodeIPs changed for the node", "verbose", true)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		got = append(got, fmt.Sprint(m["level"], " ", m["message"], " ", m["node"], " ", m["logger"], " ", m["ipFamily"]))
	}
	want := []string{
		"info NodeIPs changed for the node n1 <nil> <nil>",
		"info NodeIPs changed for the node <nil> proxy IPv4",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRouteKlog_Contextual: the routed sink is the components' contextual
// logger. Like klog's default -v it logs verbosity 0 only, even at debug
// level, and a component's verbosity check (the scheduler makes one per
// node and plugin) allocates nothing.
func TestRouteKlog_Contextual(t *testing.T) {
	var out bytes.Buffer
	log, err := (&logFlags{level: "debug", format: "json"}).logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	routeKlog(log)
	t.Cleanup(klog.ClearLogger)
	logger := klog.FromContext(context.Background())
	if _, ok := logger.GetSink().(*klogSink); !ok {
		t.Fatalf("the contextual logger's sink is %T, not sqlkube's", logger.GetSink())
	}
	logger.V(4).Info("a verbose line")
	klog.V(2).InfoS("another verbose line")
	logger.Info("a line")
	if got := strings.Count(out.String(), "\n"); got != 1 || !strings.Contains(out.String(), `"message":"a line"`) {
		t.Errorf("logged:\n%s", out.String())
	}
	if n := testing.AllocsPerRun(100, func() { _ = logger.V(5).Enabled() }); n != 0 {
		t.Errorf("a verbosity check allocates %v times", n)
	}
}

// TestRouteKlog_Quiet: error lines a route names are logged at debug
// level, those with an until line only until it has been logged; a
// cancelled context is never a warning; every other error line is one.
func TestRouteKlog_Quiet(t *testing.T) {
	var out bytes.Buffer
	log, err := (&logFlags{level: "info", format: "json"}).logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	grace := quietGrace
	quietGrace = 0
	t.Cleanup(func() { quietGrace = grace })
	routeKlogQuiet(log, nil, []quietLine{
		{message: "node not there", until: "registered"},
		{message: "no checkpoint", err: "not found"},
	})
	t.Cleanup(klog.ClearLogger)
	logger := klog.Background().WithName("kubelet")
	logger.Error(errors.New("node x not found"), "node not there")
	logger.Error(errors.New("checkpoint is not found"), "no checkpoint")
	logger.Error(errors.New("checksum mismatch"), "no checkpoint")
	logger.Error(fmt.Errorf("watch: %w", context.Canceled), "Failed to watch")
	klog.InfoS("registered", "node", "x")
	logger.Error(errors.New("node x not found"), "node not there")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		got = append(got, fmt.Sprint(m["level"], " ", m["message"], " ", m["error"]))
	}
	want := []string{
		"warn no checkpoint checksum mismatch",
		"info registered <nil>",
		"warn node not there node x not found",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
