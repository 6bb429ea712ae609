package admission

import (
	"maps"
	"sync"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/openapi"
)

// The mutating-policy plugin keeps its type converters current by reading
// the server's /openapi/v3 index every 5 s (its TypeConverterManager): in
// a host of a hundred tenants, twenty requests a second that find nothing
// new. Its client, in the server's process, is given the index's
// generation instead, and reads the index again only when that changes.

// openAPIPathsClient is client whose discovery's OpenAPIV3 paths are
// cached by generation (openAPIPaths).
func openAPIPathsClient(client kubernetes.Interface, generation func() (uint64, bool)) kubernetes.Interface {
	d := client.Discovery()
	return pathsClient{Interface: client, discovery: pathsDiscovery{
		DiscoveryInterfaces: d,
		v3:                  &openAPIPaths{Client: d.OpenAPIV3(), generation: generation},
	}}
}

type pathsClient struct {
	kubernetes.Interface
	discovery discovery.DiscoveryInterfaces
}

func (c pathsClient) Discovery() discovery.DiscoveryInterfaces { return c.discovery }

// pathsDiscovery caches OpenAPIV3's index, what the plugin calls; the
// rest (OpenAPIV3WithContext too) is the client's own.
type pathsDiscovery struct {
	discovery.DiscoveryInterfaces
	v3 openapi.Client
}

func (d pathsDiscovery) OpenAPIV3() openapi.Client { return d.v3 }

// openAPIPaths is an OpenAPI v3 client whose index (Paths) is read again
// only when the generation has changed since it was read, or on every
// call while the generation cannot tell. The generation is read before
// the index, so a change made while reading shows next time.
type openAPIPaths struct {
	openapi.Client
	generation func() (uint64, bool)

	mu    sync.Mutex
	seen  uint64
	have  bool // paths were read at generation seen
	paths map[string]openapi.GroupVersion
}

func (p *openAPIPaths) Paths() (map[string]openapi.GroupVersion, error) {
	g, ok := p.generation()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ok || !p.have || g != p.seen {
		paths, err := p.Client.Paths()
		if err != nil {
			p.have = false
			return nil, err
		}
		p.paths, p.seen, p.have = paths, g, ok
	}
	return maps.Clone(p.paths), nil
}
