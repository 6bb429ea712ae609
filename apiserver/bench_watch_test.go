package apiserver_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sqlkube/sqlkube/apiserver"
)

// newTLSServer is newServer over HTTPS with HTTP/2, as client-go talks
// to a real API server (every watch of a client on one connection).
func newTLSServer(tb testing.TB) *rest.Config {
	tb.Helper()
	api, err := apiserver.New(apiserver.Config{Client: newStorage(tb), Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := api.Bootstrap(context.Background()); err != nil { // the default namespace
		api.Close()
		tb.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(api.Handler())
	hs.EnableHTTP2 = true
	hs.StartTLS()
	tb.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		api.Close()
	})
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	return &rest.Config{Host: hs.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

// arrival is one watcher's receipt of one update.
type arrival struct {
	rv string
	at time.Time
}

// BenchmarkServer_WatchLatency: the time from an update's response to
// its MODIFIED event arriving at each of N watchers, through client-go
// over HTTPS (HTTP/2) against the in-process server on SQLite. One update
// at a time (b.N of them), the next once every watcher has the last; an
// event that arrives before the update's response counts as 0 (the event
// leaves at commit, the response after encoding), so req-p50/req-p99 also
// measure from the moment the update was sent, and %before-response says
// how often the event won.
func BenchmarkServer_WatchLatency(b *testing.B) {
	for _, watchers := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("watchers-%d", watchers), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cs := benchClient(b, newTLSServer(b))
			cms := cs.CoreV1().ConfigMaps("default")
			cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			arrivals := make(chan arrival, watchers)
			for range watchers {
				w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: cm.ResourceVersion})
				if err != nil {
					b.Fatal(err)
				}
				defer w.Stop()
				go func() {
					for ev := range w.ResultChan() {
						if m, ok := ev.Object.(*corev1.ConfigMap); ok {
							arrivals <- arrival{rv: m.ResourceVersion, at: time.Now()}
						}
					}
				}()
			}
			lat := make([]time.Duration, 0, b.N*watchers)     // from the update's response
			fromReq := make([]time.Duration, 0, b.N*watchers) // from the update's request
			early := 0
			b.ResetTimer()
			for i := range b.N {
				cm.Data["n"] = strconv.Itoa(i + 1)
				start := time.Now()
				cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
				if err != nil {
					b.Fatal(err)
				}
				sent := time.Now()
				for got := 0; got < watchers; {
					select {
					case a := <-arrivals:
						if a.rv != cm.ResourceVersion {
							b.Fatalf("update %d: event at resourceVersion %s, want %s", i, a.rv, cm.ResourceVersion)
						}
						lat = append(lat, max(a.at.Sub(sent), 0))
						fromReq = append(fromReq, a.at.Sub(start))
						if a.at.Before(sent) {
							early++
						}
						got++
					case <-time.After(10 * time.Second):
						b.Fatalf("update %d: %d of %d watchers got it within 10s", i, got, watchers)
					}
				}
			}
			b.StopTimer()
			reportPercentiles(b, lat, "")
			reportPercentiles(b, fromReq, "req-")
			b.ReportMetric(100*float64(early)/float64(len(lat)), "%before-response")
		})
	}
}

// reportPercentiles reports the p50 and p99 of lat in milliseconds.
func reportPercentiles(b *testing.B, lat []time.Duration, prefix string) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, prefix+"p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, prefix+"p99-ms")
}
