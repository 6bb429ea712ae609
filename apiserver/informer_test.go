package apiserver_test

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/storage"
)

// restartableServer is an API server on a SQLite file that can be stopped
// and started again on the same address and database.
type restartableServer struct {
	dsn, addr string
	stop      func()
}

func (r *restartableServer) start(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	be, err := sqlstore.Open(ctx, sqlstore.Options{DSN: r.dsn, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	srv := etcdshim.New(etcdshim.Options{Backend: be, Logger: zerolog.Nop()})
	client := storage.Local(srv)
	api, err := apiserver.New(apiserver.Config{Client: client, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(ctx); err != nil { // the default namespace
		t.Fatal(err)
	}
	var l net.Listener
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, err = net.Listen("tcp", r.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the old listener's port is being released
	}
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	hs := &http.Server{Handler: api.Handler()}
	go func() { _ = hs.Serve(l) }()
	r.stop = func() {
		api.StopWatches()
		_ = hs.Close()
		api.Close()
		_ = client.Close()
		srv.Stop(time.Second)
		_ = be.Close()
	}
}

// TestInformer_SurvivesRestart: a shared informer keeps in sync across a
// server restart - it resumes or relists - and ends with the final state,
// including changes made right after the restart.
func TestInformer_SurvivesRestart(t *testing.T) {
	rs := &restartableServer{dsn: "sqlite://" + filepath.Join(t.TempDir(), "state.db"), addr: "127.0.0.1:0"}
	rs.start(t)
	t.Cleanup(func() { rs.stop() })
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://" + rs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := cs.CoreV1().ConfigMaps("default")
	create := func(name, value string) {
		t.Helper()
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": value}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("a", "1")
	create("b", "1")

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel() // the informers stop, then Shutdown waits for them
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	state := func() string {
		var out []string
		for _, o := range inf.GetStore().List() {
			cm := o.(*corev1.ConfigMap)
			out = append(out, cm.Name+"="+cm.Data["v"])
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for state() != want {
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("informer state %q, want %q", state(), want)
			}
		}
	}
	waitFor("a=1,b=1")

	rs.stop()
	rs.start(t)
	// Changes right after the restart, while the informer reconnects.
	a, err := cms.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Data["v"] = "2"
	if _, err := cms.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create("c", "1")
	waitFor("a=2,c=1")
}
