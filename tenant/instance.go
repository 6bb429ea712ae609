package tenant

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sqlkube/sqlkube/apiserver"
	"github.com/sqlkube/sqlkube/controlplane"
	"github.com/sqlkube/sqlkube/etcdshim"
	"github.com/sqlkube/sqlkube/etcdshim/sqlstore"
	"github.com/sqlkube/sqlkube/storage"
)

// instance is one running tenant control plane: its store, its etcd API
// (in-process only) and controlplane.Serve, until stop.
type instance struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{} // closed when everything has stopped
	err    error         // why it stopped, once done is closed

	mu      sync.Mutex
	serving *controlplane.Serving
	store   *sqlstore.Store // open (nil before, and once stopped)
	ready   chan struct{}   // closed when serving
}

// runInstance starts a tenant on l with cfg (a copy is kept), its data in
// the store opened with store. It returns at once; the instance serves until stop.
func runInstance(parent context.Context, name string, store sqlstore.Options, cfg controlplane.Config, l net.Listener, log zerolog.Logger) *instance {
	ctx, cancel := context.WithCancel(parent)
	in := &instance{name: name, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	cfg.Listener = l
	cfg.Log = log
	cfg.Serving = func(s controlplane.Serving) {
		in.mu.Lock()
		in.serving = &s
		in.mu.Unlock()
		close(in.ready)
	}
	go func() {
		defer close(in.done)
		in.err = in.serve(ctx, store, &cfg)
		if in.err == nil && ctx.Err() == nil {
			in.err = fmt.Errorf("tenant %s stopped serving", name)
		}
	}()
	return in
}

func (in *instance) serve(ctx context.Context, opts sqlstore.Options, cfg *controlplane.Config) error {
	start := time.Now()
	log := cfg.Log
	store, err := sqlstore.Open(ctx, opts)
	if err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return err
	}
	defer store.Close()
	in.mu.Lock()
	in.store = store
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.store = nil
		in.mu.Unlock()
	}()
	// A tenant's /readyz says when the disk under its SQLite store is
	// full, as sqlkube server's does (a tenant serves no /metrics).
	cfg.ReadyzChecks = append(cfg.ReadyzChecks, apiserver.ReadyzCheck{Name: "datastore-disk", Check: store.CheckDiskSpace})
	etcd := etcdshim.New(etcdshim.Options{Backend: store, Logger: log, ClusterKey: store.Describe()})
	defer etcd.Stop(5 * time.Second)
	client := storage.Local(etcd)
	defer client.Close()
	if err := controlplane.EstablishIdentity(ctx, client.KV, cfg); err != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return err
	}
	crashPoint(CrashAfterIdentity, in.name)
	return controlplane.Serve(ctx, cfg, client, store.Describe(), start)
}

// stop stops the instance and waits until it has.
func (in *instance) stop() error {
	in.cancel()
	<-in.done
	return in.err
}

// openStore is the instance's store while it is open (nil: not yet, or
// no longer).
func (in *instance) openStore() *sqlstore.Store {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.store
}

// waitReady waits until the instance serves, stops, or ctx ends.
func (in *instance) waitReady(ctx context.Context) (*controlplane.Serving, error) {
	select {
	case <-in.ready:
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.serving, nil
	case <-in.done:
		return nil, in.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
