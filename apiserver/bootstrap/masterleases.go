package bootstrap

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseKeys are the API servers' lease keys (masterLeasePrefix), which a
// watch follows so that a reconcile reads none of them: an idle server's
// reconcile sends the datastore a keepalive and nothing else.
type leaseKeys struct {
	mu sync.Mutex
	// keys by key; nil while no watch follows them.
	keys map[string]*mvccpb.KeyValue
}

// follow lists the keys and follows them by a watch until ctx ends. When
// the watch ends (its revision compacted, an error), the keys are unknown
// until they are listed again, a second later.
func (l *leaseKeys) follow(ctx context.Context, c *clientv3.Client, log zerolog.Logger) {
	for {
		err := l.listAndWatch(ctx, c)
		l.set(nil)
		if ctx.Err() != nil {
			return
		}
		log.Debug().Err(err).Msg("following the API servers' lease keys: listing them again")
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (l *leaseKeys) listAndWatch(ctx context.Context, c *clientv3.Client) error {
	resp, err := c.Get(ctx, masterLeasePrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	keys := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys[string(kv.Key)] = kv
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// From the list's revision on, so no change falls between the two.
	events := c.Watch(ctx, masterLeasePrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	l.set(keys)
	for wr := range events {
		if err := wr.Err(); err != nil {
			return err
		}
		l.mu.Lock()
		for _, ev := range wr.Events {
			if cur := l.keys[string(ev.Kv.Key)]; cur != nil && cur.ModRevision > ev.Kv.ModRevision {
				continue // older than what this server wrote since (wrote)
			}
			if ev.Type == clientv3.EventTypeDelete {
				delete(l.keys, string(ev.Kv.Key))
			} else {
				l.keys[string(ev.Kv.Key)] = ev.Kv
			}
		}
		l.mu.Unlock()
	}
	return errors.New("watch closed")
}

func (l *leaseKeys) set(keys map[string]*mvccpb.KeyValue) {
	l.mu.Lock()
	l.keys = keys
	l.mu.Unlock()
}

// snapshot returns the keys, and false when no watch follows them.
func (l *leaseKeys) snapshot() ([]*mvccpb.KeyValue, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		return nil, false
	}
	kvs := make([]*mvccpb.KeyValue, 0, len(l.keys))
	for _, kv := range l.keys {
		kvs = append(kvs, kv)
	}
	return kvs, true
}

// wrote records a key this server wrote, before its watch event comes.
func (l *leaseKeys) wrote(kv *mvccpb.KeyValue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys != nil {
		l.keys[string(kv.Key)] = kv
	}
}
