package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/discovery"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/transport"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationhelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
)

// Discovery of aggregated group-versions. The legacy /apis list names
// every APIService's group-version, available or not, as kube-aggregator
// does (clients learn of an unavailable one from its 503). Aggregated
// discovery lists the resources of available ones, fetched from the
// backend's /apis/GROUP/VERSION as the aggregator's own identity and kept
// for discoveryTTL; a version whose backend is unavailable or does not
// answer is listed Stale, without resources.

const (
	// discoveryTTL is how long a backend's resource list is used;
	// discoveryErrorTTL how long a failure to fetch it is.
	discoveryTTL, discoveryErrorTTL = 30 * time.Second, 5 * time.Second
	// discoveryTimeout bounds one fetch.
	discoveryTimeout = 5 * time.Second
)

// backendDiscovery is a fetched resource list (or the failure) for one
// version of an APIService.
type backendDiscovery struct {
	resourceVersion string
	at              time.Time
	list            *metav1.APIResourceList
	err             error
}

// remoteGroups are the APIServices with a service, by group, each group
// and its versions in kube-aggregator's priority order.
func (a *Aggregator) remoteGroups() [][]*apiregistrationv1.APIService {
	if a == nil {
		return nil
	}
	all, err := a.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var remote []*apiregistrationv1.APIService
	for _, svc := range all {
		if svc.Spec.Service != nil && svc.Spec.Group != "" {
			remote = append(remote, svc)
		}
	}
	if len(remote) == 0 {
		return nil
	}
	return apiregistrationhelper.SortedByGroupAndVersion(remote)
}

// HasGroups reports whether any APIService has a service: whether
// aggregated servers add group-versions to discovery.
func (a *Aggregator) HasGroups() bool { return len(a.remoteGroups()) > 0 }

// MergeGroups adds the aggregated servers' groups to out, the groups
// served here (an aggregated version of a group served here joins its
// versions).
func (a *Aggregator) MergeGroups(out []metav1.APIGroup) []metav1.APIGroup {
	for _, svcs := range a.remoteGroups() {
		i := slices.IndexFunc(out, func(g metav1.APIGroup) bool { return g.Name == svcs[0].Spec.Group })
		if i < 0 {
			v := groupVersionFor(svcs[0])
			out = append(out, metav1.APIGroup{Name: svcs[0].Spec.Group, PreferredVersion: v})
			i = len(out) - 1
		}
		for _, svc := range svcs {
			v := groupVersionFor(svc)
			if !slices.Contains(out[i].Versions, v) {
				out[i].Versions = append(out[i].Versions, v)
			}
		}
	}
	return out
}

func groupVersionFor(svc *apiregistrationv1.APIService) metav1.GroupVersionForDiscovery {
	return metav1.GroupVersionForDiscovery{GroupVersion: svc.Spec.Group + "/" + svc.Spec.Version, Version: svc.Spec.Version}
}

// MergeAggregated adds the aggregated group-versions to the aggregated
// discovery list of named groups.
func (a *Aggregator) MergeAggregated(ctx context.Context, list *apidiscoveryv2.APIGroupDiscoveryList) {
	for _, svcs := range a.remoteGroups() {
		i := slices.IndexFunc(list.Items, func(g apidiscoveryv2.APIGroupDiscovery) bool { return g.Name == svcs[0].Spec.Group })
		if i < 0 {
			list.Items = append(list.Items, apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: svcs[0].Spec.Group}})
			i = len(list.Items) - 1
		}
		for _, svc := range svcs {
			if slices.ContainsFunc(list.Items[i].Versions, func(v apidiscoveryv2.APIVersionDiscovery) bool { return v.Version == svc.Spec.Version }) {
				continue
			}
			v := apidiscoveryv2.APIVersionDiscovery{Version: svc.Spec.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessStale}
			if apiregistrationhelper.IsAPIServiceConditionTrue(svc, apiregistrationv1.Available) {
				if resources, err := a.resources(ctx, svc); err == nil {
					v = discovery.VersionDiscoveryOf(schema.GroupVersion{Group: svc.Spec.Group, Version: svc.Spec.Version}, resources)
				}
			}
			list.Items[i].Versions = append(list.Items[i].Versions, v)
		}
	}
}

// resources is the resource list svc's backend serves (cached).
func (a *Aggregator) resources(ctx context.Context, svc *apiregistrationv1.APIService) (*metav1.APIResourceList, error) {
	a.mu.Lock()
	cur, ok := a.discovery[svc.Name]
	a.mu.Unlock()
	if ok && cur.resourceVersion == svc.ResourceVersion {
		if age := time.Since(cur.at); (cur.err == nil && age < discoveryTTL) || (cur.err != nil && age < discoveryErrorTTL) {
			return cur.list, cur.err
		}
	}
	list, err := a.fetchResources(ctx, svc)
	a.mu.Lock()
	a.discovery[svc.Name] = backendDiscovery{resourceVersion: svc.ResourceVersion, at: time.Now(), list: list, err: err}
	a.mu.Unlock()
	return list, err
}

func (a *Aggregator) fetchResources(ctx context.Context, svc *apiregistrationv1.APIService) (*metav1.APIResourceList, error) {
	body, err := a.fetch(ctx, svc, "/apis/"+svc.Spec.Group+"/"+svc.Spec.Version, "application/json")
	if err != nil {
		return nil, err
	}
	list := &metav1.APIResourceList{}
	if err := json.Unmarshal(body, list); err != nil {
		return nil, fmt.Errorf("APIService %s: discovery: %w", svc.Name, err)
	}
	return list, nil
}

// fetch GETs path from svc's backend as the aggregator (at most 10 MiB,
// within discoveryTimeout).
func (a *Aggregator) fetch(ctx context.Context, svc *apiregistrationv1.APIService, path, accept string) ([]byte, error) {
	rt, err := a.transport(svc)
	if err != nil {
		return nil, err
	}
	location, err := a.resolve(svc)
	if err != nil {
		return nil, err
	}
	location.Path = path
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, location.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	transport.SetAuthProxyHeaders(req, aggregatorIdentity.Name, "", aggregatorIdentity.Groups, nil)
	resp, err := (&http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("APIService %s: %w", svc.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 10<<20))
	if err != nil {
		return nil, fmt.Errorf("APIService %s: %w", svc.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("APIService %s: %s answered %d", svc.Name, path, resp.StatusCode)
	}
	return body, nil
}

var _ discovery.Remote = (*Aggregator)(nil)
