package openapi

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"sync"
)

// The documents depend only on the resources served and the info, which
// are the same for every API server of a process but for custom
// resources (served on top, per server). A host of many tenant control
// planes builds them once: Shared keeps one Builder per distinct input
// for the life of the process (each costs about 15 MB and a third of a
// CPU second).
var shared struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*sharedBuild
}

type sharedBuild struct {
	once sync.Once
	b    *Builder
	err  error
}

// Shared is NewBuilder(resources, info), built once per process for
// equal inputs. What Builder returns is read-only, so servers share it.
func Shared(resources []Resource, info Info) (*Builder, error) {
	key := inputKey(resources, info)
	shared.mu.Lock()
	if shared.m == nil {
		shared.m = map[[sha256.Size]byte]*sharedBuild{}
	}
	sb := shared.m[key]
	if sb == nil {
		sb = &sharedBuild{}
		shared.m[key] = sb
	}
	shared.mu.Unlock()
	sb.once.Do(func() { sb.b, sb.err = NewBuilder(resources, info) })
	if sb.err != nil {
		shared.mu.Lock()
		delete(shared.m, key) // a later call tries again
		shared.mu.Unlock()
	}
	return sb.b, sb.err
}

// inputKey identifies what NewBuilder's output depends on: each
// resource's names, scope, verbs, subresources and Go types.
func inputKey(resources []Resource, info Info) [sha256.Size]byte {
	h := sha256.New()
	typ := func(o any) string {
		if o == nil {
			return "-"
		}
		return reflect.TypeOf(o).String()
	}
	fmt.Fprintf(h, "%q %q\n", info.Title, info.Version)
	for _, r := range resources {
		fmt.Fprintf(h, "%s %q %q %v %q %s %s\n", r.GVK, r.ListKind, r.Plural, r.Namespaced, r.Verbs, typ(r.Object), typ(r.List))
		for _, s := range r.Subresources {
			fmt.Fprintf(h, " %q %q %s %s\n", s.Name, s.Verbs, s.GVK, typ(s.Object))
		}
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}
