package apiserver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	e2ewebsocket "k8s.io/kubernetes/test/e2e/framework/websocket"

	"github.com/sqlkube/sqlkube/apiserver"
)

// fakeKubelet serves a container's log as a kubelet does
// (/containerLogs/NAMESPACE/POD/CONTAINER): "line 1\n", then, once
// release is closed, "line 2\n".
func fakeKubelet(release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/containerLogs/default/web/app" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "line 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "line 2\n")
	})
}

// TestPodLog_Websocket: pods/log streams over a websocket to Kubernetes'
// e2e framework's client (its "should support retrieving logs from the
// container over websockets" conformance test connects so): binary
// messages with binary.k8s.io, base64 text with base64.binary.k8s.io,
// each read of the kubelet's stream sent as it comes, the socket closed
// at the end; plain GETs still answer text.
func TestPodLog_Websocket(t *testing.T) {
	network := &clusterNetwork{}
	cfg, _ := newServerWith(t, apiserver.Config{ClusterDial: network.dial})
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	release := make(chan struct{})
	kubeletPort := listenOn(t, network, httptest.NewUnstartedServer(fakeKubelet(release)), true, testNodeIP)
	createNode(t, cs, "vm", testNodeIP, kubeletPort)
	pod := simplePod("web")
	pod.Spec.NodeName = "vm"
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logURL := cs.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name("web").Suffix("log").Param("container", "app").URL()

	// Binary: the first line arrives while the kubelet holds the
	// second.
	ws, err := e2ewebsocket.OpenWebSocketForURL(logURL, cfg, []string{"binary.k8s.io"})
	if err != nil {
		t.Fatalf("opening a websocket to %s: %v", logURL, err)
	}
	defer ws.Close()
	if err := ws.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if first := readMessages(t, ws, 1); first != "line 1\n" {
		t.Fatalf("first message %q", first)
	}
	close(release)
	if rest := readMessages(t, ws, -1); rest != "line 2\n" {
		t.Fatalf("after the first message: %q", rest)
	}

	// base64: text messages.
	ws64, err := e2ewebsocket.OpenWebSocketForURL(logURL, cfg, []string{"base64.binary.k8s.io"})
	if err != nil {
		t.Fatal(err)
	}
	defer ws64.Close()
	if err := ws64.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var decoded bytes.Buffer
	for {
		var msg string
		if err := websocket.Message.Receive(ws64, &msg); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		b, err := base64.StdEncoding.DecodeString(msg)
		if err != nil {
			t.Fatalf("message %q is not base64: %v", msg, err)
		}
		decoded.Write(b)
	}
	if decoded.String() != "line 1\nline 2\n" {
		t.Errorf("base64 log %q", decoded.String())
	}

	// Without a websocket.
	body, err := cs.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	if err != nil || string(body) != "line 1\nline 2\n" {
		t.Errorf("GET log: %q, %v", body, err)
	}
}

// readMessages reads n binary messages (all until the socket closes if n
// is negative), skipping empty ones, and returns them joined.
func readMessages(t *testing.T, ws *websocket.Conn, n int) string {
	t.Helper()
	var buf bytes.Buffer
	for n != 0 {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			if n < 0 && errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("reading the log: %v (so far %q)", err, buf.String())
		}
		if len(msg) == 0 {
			continue
		}
		buf.Write(msg)
		n--
	}
	return buf.String()
}
