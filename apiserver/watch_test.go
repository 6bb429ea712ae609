package apiserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// nextEvent waits up to 10 s for the next event of w.
func nextEvent(t *testing.T, w watch.Interface) (watch.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return watch.Event{}, false
	}
}

func createConfigMaps(t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitReady waits for /readyz (every watch cache filled).
func waitReady(t *testing.T, cfg *rest.Config) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(cfg.Host + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("not ready within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWatch_Websocket: a watch asked for over a websocket gets one JSON
// text message per event.
func TestWatch_Websocket(t *testing.T) {
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	list, err := cs.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url := "ws" + strings.TrimPrefix(cfg.Host, "http") + "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=" + list.ResourceVersion
	ws, err := websocket.Dial(url, "", cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	createConfigMaps(t, cs, "one", "two")
	for _, want := range []string{"one", "two"} {
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		var msg string
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Type   string
			Object corev1.ConfigMap
		}
		if err := json.Unmarshal([]byte(msg), &ev); err != nil {
			t.Fatalf("message %q: %v", msg, err)
		}
		if ev.Type != "ADDED" || ev.Object.Name != want || ev.Object.Kind != "ConfigMap" {
			t.Fatalf("got %s %s (%s), want ADDED %s", ev.Type, ev.Object.Name, ev.Object.Kind, want)
		}
	}
}

// TestWatch_BookmarksAndTimeout: a watch that allows bookmarks gets one
// (metadata.resourceVersion only) 2 s before its timeoutSeconds, as the
// watch cache sends them, then the stream ends cleanly.
func TestWatch_BookmarksAndTimeout(t *testing.T) {
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	waitReady(t, cfg)
	createConfigMaps(t, cs, "a")
	w, err := cs.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{
		ResourceVersion: "0", AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](3),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	var types []watch.EventType
	var bookmark *corev1.ConfigMap
	for {
		ev, ok := nextEvent(t, w)
		if !ok {
			break
		}
		types = append(types, ev.Type)
		if ev.Type == watch.Bookmark {
			bookmark = ev.Object.(*corev1.ConfigMap)
		}
	}
	took := time.Since(start)
	if fmt.Sprint(types) != "[ADDED BOOKMARK]" {
		t.Fatalf("events: got %v, want [ADDED BOOKMARK]", types)
	}
	if bookmark.ResourceVersion == "" || bookmark.Name != "" || len(bookmark.Annotations) != 0 {
		t.Errorf("bookmark is not only a resourceVersion: %+v", bookmark.ObjectMeta)
	}
	if took < 2*time.Second || took > 8*time.Second {
		t.Errorf("a 3s watch ended after %s", took)
	}

	// Raw HTTP: the chunked stream ends with its final chunk, no error.
	resp, err := http.Get(cfg.Host + "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	lines := 0
	for sc.Scan() {
		lines++
	}
	if err := sc.Err(); err != nil || resp.StatusCode != http.StatusOK || lines != 1 {
		t.Fatalf("watch with timeoutSeconds=1: status %d, %d events, read error %v", resp.StatusCode, lines, err)
	}
}

// TestWatch_SendInitialEvents: sendInitialEvents streams the current
// objects as ADDED events, then a bookmark annotated
// k8s.io/initial-events-end, then changes; the options are checked as
// kube-apiserver checks them.
func TestWatch_SendInitialEvents(t *testing.T) {
	cfg := newServer(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	waitReady(t, cfg)
	createConfigMaps(t, cs, "a", "b", "c")
	cms := cs.CoreV1().ConfigMaps("default")
	w, err := cms.Watch(context.Background(), metav1.ListOptions{
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for len(got) < 4 {
		ev, ok := nextEvent(t, w)
		if !ok {
			t.Fatalf("watch closed after %v", got)
		}
		m, _ := ev.Object.(*corev1.ConfigMap)
		got = append(got, fmt.Sprintf("%s %s %s", ev.Type, m.Name, m.Annotations[metav1.InitialEventsAnnotationKey]))
	}
	if want := "[ADDED a  ADDED b  ADDED c  BOOKMARK  true]"; fmt.Sprint(got) != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	createConfigMaps(t, cs, "d")
	if ev, _ := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "d" {
		t.Fatalf("after the initial events: got %s %v", ev.Type, ev.Object)
	}

	for _, bad := range []metav1.ListOptions{
		{Watch: true, SendInitialEvents: ptr.To(true)},
		{Watch: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
	} {
		if _, err := cms.Watch(context.Background(), bad); !apierrors.IsInvalid(err) {
			t.Errorf("watch %+v: got %v, want 422 Invalid", bad, err)
		}
	}
	if _, err := cms.List(context.Background(), metav1.ListOptions{SendInitialEvents: ptr.To(true)}); !apierrors.IsInvalid(err) {
		t.Errorf("list with sendInitialEvents: got %v, want 422 Invalid", err)
	}
}

// watchListGates turns client-go's WatchListClient feature on.
type watchListGates struct{ clientfeatures.Gates }

func (g watchListGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.WatchListClient || g.Gates.Enabled(f)
}

// TestWatch_ClientGoWatchList: an informer with client-go's WatchList
// feature fills its cache from one streaming watch, never a list.
func TestWatch_ClientGoWatchList(t *testing.T) {
	prev := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(watchListGates{prev})
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(prev) })

	cfg := rest.CopyConfig(newServer(t))
	waitReady(t, cfg)
	createConfigMaps(t, kubernetes.NewForConfigOrDie(cfg), "a", "b")
	var (
		mu   sync.Mutex
		urls []string
	)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			urls = append(urls, req.URL.RawQuery)
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if keys := inf.GetStore().ListKeys(); len(keys) != 2 {
		t.Fatalf("informer holds %v", keys)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(urls) == 0 || !strings.Contains(urls[0], "sendInitialEvents=true") {
		t.Fatalf("requests: %q, want a watch with sendInitialEvents=true first", urls)
	}
	for _, q := range urls {
		if !strings.Contains(q, "watch=true") {
			t.Fatalf("informer listed (%q); requests %q", q, urls)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWatch_Expired: a watch from a compacted resourceVersion gets a 410
// Gone Status as an ERROR event; a list continued from a compacted
// resourceVersion gets a plain 410.
func TestWatch_Expired(t *testing.T) {
	cfg, etcd := newServerWithStorage(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	cms := cs.CoreV1().ConfigMaps("default")
	createConfigMaps(t, cs, "a", "b", "c")
	page, err := cms.List(context.Background(), metav1.ListOptions{Limit: 1})
	if err != nil || page.Continue == "" {
		t.Fatalf("first page: %v %+v", err, page.ListMeta)
	}
	createConfigMaps(t, cs, "d")
	ctx := context.Background()
	cur, err := etcd.Client.Get(ctx, "/registry/configmaps/default/d")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	// A watch cache keeps its own history of recent events whatever the
	// database compacted (as kube-apiserver's does); a second API server
	// starts after the compaction, so its history begins there.
	cfg = serveAPI(t, etcd)
	waitReady(t, cfg)
	cms = kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default")

	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev, ok := nextEvent(t, w)
	if !ok || ev.Type != watch.Error {
		t.Fatalf("got %v %s, want an ERROR event", ok, ev.Type)
	}
	if st, _ := ev.Object.(*metav1.Status); st == nil || st.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("got %#v, want a 410 Expired Status", ev.Object)
	}
	if _, ok := nextEvent(t, w); ok {
		t.Fatal("the watch went on after its ERROR event")
	}

	_, err = cms.List(ctx, metav1.ListOptions{Limit: 1, Continue: page.Continue})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("list continued from a compacted revision: got %v, want 410", err)
	}
}
