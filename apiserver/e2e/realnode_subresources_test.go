package e2e

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	e2ewebsocket "k8s.io/kubernetes/test/e2e/framework/websocket"
)

// TestRealNode_Subresources: the subresources that reach running pods,
// on the server's own node: pods/proxy and services/proxy to a pod's
// HTTP server over the pod network and nodes/proxy to the kubelet (with
// each kubectl's get --raw), a log read over a websocket as the
// conformance suite reads it, and kubectl debug's ephemeral container run
// by the kubelet. (pods/resize is TestRealNode_PodFeatures'.)
func TestRealNode_Subresources(t *testing.T) {
	requireNodeHost(t)
	s := startNodeServer(t, filepath.Join(t.TempDir(), "data"), "e2e-sub")
	kubectl := kubectlPath(t)
	s.mustKubectl(t, kubectl, "run", "web", "--image="+testImage, "--restart=Never", "--port=8080", "--",
		"sh", "-c", "mkdir -p /www && echo hello-web > /www/index.html && echo serving && exec httpd -f -p 8080 -h /www")
	s.mustKubectl(t, kubectl, "expose", "pod", "web", "--port=80", "--target-port=8080")
	s.mustKubectl(t, kubectl, "wait", "--for=condition=Ready", "pod/web", "--timeout=60s")

	for name, bin := range kubectls(t) {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{
				"/api/v1/namespaces/default/pods/web/proxy/index.html",
				"/api/v1/namespaces/default/pods/web:8080/proxy/index.html",
				"/api/v1/namespaces/default/pods/http:web:8080/proxy/index.html",
			} {
				if out := s.mustKubectl(t, bin, "get", "--raw", path); out != "hello-web\n" {
					t.Errorf("get --raw %s: %q", path, out)
				}
			}
			// The endpoints controller fills the service's Endpoints.
			s.waitKubectl(t, bin, "hello-web", "get", "--raw", "/api/v1/namespaces/default/services/web/proxy/index.html")
			if out := s.mustKubectl(t, bin, "get", "--raw", "/api/v1/nodes/e2e-sub/proxy/healthz"); out != "ok" {
				t.Errorf("the kubelet's healthz through nodes/proxy: %q", out)
			}
		})
	}

	t.Run("log over a websocket", func(t *testing.T) {
		cfg := s.restConfig(t, s.kubeconfig)
		cs := s.clientset(t)
		logURL := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name("web").Suffix("log").Param("container", "web").URL()
		ws, err := e2ewebsocket.OpenWebSocketForURL(logURL, cfg, []string{"binary.k8s.io"})
		if err != nil {
			t.Fatalf("opening a websocket to %s: %v", logURL, err)
		}
		defer ws.Close()
		if err := ws.SetReadDeadline(time.Now().Add(commandTimeout)); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for {
			var msg []byte
			if err := websocket.Message.Receive(ws, &msg); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("reading the log: %v (so far %q)", err, buf.String())
				}
				break
			}
			buf.Write(msg)
		}
		if buf.String() != "serving\n" {
			t.Errorf("the log over a websocket: %q", buf.String())
		}
	})

	t.Run("debug", func(t *testing.T) {
		s.mustKubectl(t, kubectl, "debug", "web", "--image="+testImage, "--container=dbg", "--target=web", "--",
			"sh", "-c", "echo debugging; sleep 3600")
		s.waitKubectl(t, kubectl, "debugging", "logs", "web", "-c", "dbg")
	})
}
