package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"

	"github.com/sqlkube/sqlkube/apiserver/registry"
	sqlstorage "github.com/sqlkube/sqlkube/storage"
)

// crdController makes the server serve what CustomResourceDefinitions
// define. It watches the CRDs in storage (so API servers sharing a
// database all learn of every CRD, whoever wrote it) and, for each:
//   - accepts its names unless another CRD of the group already has one
//     of them (status.acceptedNames, conditions NamesAccepted and
//     Established), registering its served versions before Established
//     is written, so a client that waited for it finds the resources;
//   - on deletion (deletionTimestamp with the cleanup finalizer) deletes
//     its custom resources, removes the finalizer and with the last one
//     the CRD, and stops serving them.
//
// Every server does the same work; the status it writes is a function of
// the stored CRDs, so servers agree and a second write changes nothing.
type crdController struct {
	s  *Server
	r  *registry.Resource
	st k8sstorage.Interface
	// mu guards served.
	mu sync.Mutex
	// served are the registered resources of each CRD by name.
	served map[string]*servedCRD
	cancel context.CancelFunc
	done   chan struct{}
}

// servedCRD is what is registered for one CRD.
type servedCRD struct {
	fingerprint string
	resources   []*registry.Resource
	stops       []func()
}

// startCRDs starts the CRD controller; Close stops it and the custom
// resources' storage.
func (s *Server) startCRDs() error {
	r, ok := s.api.Registry.Lookup(crdGVK.GroupVersion().WithResource("customresourcedefinitions"))
	if !ok {
		return errors.New("customresourcedefinitions are not registered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &crdController{s: s, r: r, st: s.api.Storages[r], served: map[string]*servedCRD{}, cancel: cancel, done: make(chan struct{})}
	s.crds = c
	go c.run(ctx)
	s.stops = append(s.stops, c.stop)
	return nil
}

func (c *crdController) stop() {
	c.cancel()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.served {
		c.unserveLocked(name)
	}
}

// run lists the CRDs, serves them, then follows the watch from the list's
// revision; when the watch ends it lists again (dropping CRDs that went
// meanwhile).
func (c *crdController) run(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		if err := c.syncAndWatch(ctx); err != nil && ctx.Err() == nil {
			c.s.cfg.Logger.Warn().Err(err).Msg("customresourcedefinitions: watch ended")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (c *crdController) syncAndWatch(ctx context.Context) error {
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.st.GetList(ctx, c.r.ListKey(""), k8sstorage.ListOptions{Predicate: k8sstorage.Everything, Recursive: true}, list); err != nil {
		return err
	}
	present := map[string]bool{}
	for i := range list.Items {
		present[list.Items[i].Name] = true
		c.reconcile(ctx, &list.Items[i])
	}
	c.mu.Lock()
	for name := range c.served {
		if !present[name] {
			c.unserveLocked(name)
		}
	}
	c.mu.Unlock()
	w, err := c.st.Watch(ctx, c.r.ListKey(""), k8sstorage.ListOptions{
		ResourceVersion: list.ResourceVersion, Predicate: k8sstorage.Everything, Recursive: true,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch closed")
			}
			crd, isCRD := crdOf(ev.Object)
			switch {
			case ev.Type == watch.Error:
				return errors.New("watch error")
			case !isCRD:
			case ev.Type == watch.Deleted:
				c.mu.Lock()
				c.unserveLocked(crd.Name)
				c.mu.Unlock()
				c.retryRejected(ctx, crd.Spec.Group)
			default:
				c.reconcile(ctx, crd)
			}
		}
	}
}

// reconcile brings one CRD's status and serving up to date.
func (c *crdController) reconcile(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) {
	log := c.s.cfg.Logger.With().Str("crd", crd.Name).Logger()
	if crd.DeletionTimestamp != nil {
		if err := c.finalize(ctx, crd); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("deleting custom resources")
		}
		return
	}
	want := crd.DeepCopy()
	others := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.st.GetList(ctx, c.r.ListKey(""), k8sstorage.ListOptions{Predicate: k8sstorage.Everything, Recursive: true}, others); err != nil {
		log.Warn().Err(err).Msg("listing customresourcedefinitions")
		return
	}
	acceptNames(want, others.Items)
	if apihelpers.IsCRDConditionTrue(want, apiextensionsv1.NamesAccepted) || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		if err := c.serve(want); err != nil {
			log.Error().Err(err).Msg("serving custom resources")
			return
		}
		apihelpers.SetCRDCondition(want, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue,
			Reason: "InitialNamesAccepted", Message: "the initial names have been accepted",
		})
	} else if !apihelpers.IsCRDConditionTrue(want, apiextensionsv1.Established) {
		apihelpers.SetCRDCondition(want, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse,
			Reason: "NotAccepted", Message: "not all names are accepted",
		})
	}
	if err := c.writeStatus(ctx, crd.Name, want.Status); err != nil && ctx.Err() == nil {
		log.Warn().Err(err).Msg("writing status")
	}
}

// retryRejected reconciles the CRDs of group whose names were not
// accepted: a deleted CRD may have freed them.
func (c *crdController) retryRejected(ctx context.Context, group string) {
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.st.GetList(ctx, c.r.ListKey(""), k8sstorage.ListOptions{Predicate: k8sstorage.Everything, Recursive: true}, list); err != nil {
		return
	}
	for i := range list.Items {
		if crd := &list.Items[i]; crd.Spec.Group == group && !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
			c.reconcile(ctx, crd)
		}
	}
}

// writeStatus stores status.acceptedNames and status.conditions if they
// differ from the stored ones (another server may have written them).
func (c *crdController) writeStatus(ctx context.Context, name string, want apiextensionsv1.CustomResourceDefinitionStatus) error {
	out := &apiextensionsv1.CustomResourceDefinition{}
	err := c.st.GuaranteedUpdate(ctx, c.r.Key("", name), out, false, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		cur := existing.(*apiextensionsv1.CustomResourceDefinition)
		updated := cur.DeepCopy()
		updated.Status.AcceptedNames = want.AcceptedNames
		for _, cond := range want.Conditions {
			apihelpers.SetCRDCondition(updated, cond)
		}
		if apiequality.Semantic.DeepEqual(cur.Status, updated.Status) {
			return nil, nil, errUnchanged
		}
		return updated, nil, nil
	}, nil)
	if errors.Is(err, errUnchanged) || k8sstorage.IsNotFound(err) {
		return nil
	}
	return err
}

// errUnchanged ends a GuaranteedUpdate that has nothing to write.
var errUnchanged = errors.New("apiserver: unchanged")

// serve registers (or re-registers, when its spec or accepted names
// changed) the served versions of crd.
func (c *crdController) serve(crd *apiextensionsv1.CustomResourceDefinition) error {
	fp, err := json.Marshal([]any{crd.UID, crd.Generation, crd.Status.AcceptedNames})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.served[crd.Name]; ok && cur.fingerprint == string(fp) {
		return nil
	}
	converter, err := c.s.converters.converter(crd)
	if err != nil {
		return err
	}
	resources, err := registry.NewCustomResources(crd, c.s.openapi.Definitions(), converter)
	if err != nil {
		return err
	}
	next := &servedCRD{fingerprint: string(fp)}
	for _, r := range resources {
		st, stop, _, err := c.s.openStorage(r)
		if err != nil {
			for _, stop := range next.stops {
				stop()
			}
			return err
		}
		r.Custom.Storage, r.Custom.Stop = st, stop
		next.resources = append(next.resources, r)
		next.stops = append(next.stops, stop)
	}
	prev := c.served[crd.Name]
	for _, r := range next.resources {
		c.s.api.Registry.Add(r)
	}
	if prev != nil {
		for _, r := range prev.resources {
			c.s.api.Registry.Remove(r) // a version no longer served, or already replaced
		}
		for _, stop := range prev.stops {
			stop()
		}
	}
	c.served[crd.Name] = next
	c.s.crdOpenAPIChanged()
	return nil
}

// unserveLocked stops serving a CRD's resources; c.mu is held.
func (c *crdController) unserveLocked(name string) {
	prev, ok := c.served[name]
	if !ok {
		return
	}
	for _, r := range prev.resources {
		c.s.api.Registry.Remove(r)
	}
	for _, stop := range prev.stops {
		stop()
	}
	delete(c.served, name)
	c.s.crdOpenAPIChanged()
}

// finalize deletes a deleted CRD's custom resources (through their
// storage when served here, so watchers see them go, then whatever is
// left under the resource's key prefix), removes the cleanup finalizer
// and, with the last finalizer, the CRD.
func (c *crdController) finalize(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	if !slices.Contains(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer) {
		return c.removeIfFinalized(ctx, crd)
	}
	terminating := crd.DeepCopy()
	apihelpers.SetCRDCondition(terminating, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
		Reason: "InstanceDeletionInProgress", Message: "CustomResource deletion is in progress",
	})
	if err := c.writeStatus(ctx, crd.Name, terminating.Status); err != nil {
		return err
	}
	c.mu.Lock()
	served := c.served[crd.Name]
	c.mu.Unlock()
	if served != nil && len(served.resources) > 0 {
		r := served.resources[0]
		list := r.NewList()
		if err := r.Custom.Storage.GetList(ctx, r.ListKey(""), k8sstorage.ListOptions{Predicate: k8sstorage.Everything, Recursive: true}, list); err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, item := range items {
			m, _ := meta.Accessor(item)
			err := r.Custom.Storage.Delete(ctx, r.Key(m.GetNamespace(), m.GetName()), r.New(), nil, k8sstorage.ValidateAllObjectFunc, nil, k8sstorage.DeleteOptions{})
			if err != nil && !k8sstorage.IsNotFound(err) {
				return err
			}
		}
	}
	prefix := sqlstorage.DefaultPrefix + "/" + crd.Spec.Group + "/" + crd.Spec.Names.Plural + "/"
	if _, err := c.s.cfg.Client.Client.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
		return err
	}
	c.mu.Lock()
	c.unserveLocked(crd.Name)
	c.mu.Unlock()
	out := &apiextensionsv1.CustomResourceDefinition{}
	err := c.st.GuaranteedUpdate(ctx, c.r.Key("", crd.Name), out, false, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		updated := existing.(*apiextensionsv1.CustomResourceDefinition).DeepCopy()
		apihelpers.CRDRemoveFinalizer(updated, apiextensionsv1.CustomResourceCleanupFinalizer)
		return updated, nil, nil
	}, nil)
	if k8sstorage.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.removeIfFinalized(ctx, out)
}

// removeIfFinalized deletes a CRD being deleted once it has no finalizers.
func (c *crdController) removeIfFinalized(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	if len(crd.Finalizers) > 0 {
		return nil
	}
	rv := crd.ResourceVersion
	err := c.st.Delete(ctx, c.r.Key("", crd.Name), &apiextensionsv1.CustomResourceDefinition{}, &k8sstorage.Preconditions{ResourceVersion: &rv}, k8sstorage.ValidateAllObjectFunc, nil, k8sstorage.DeleteOptions{})
	if k8sstorage.IsNotFound(err) || k8sstorage.IsConflict(err) {
		return nil
	}
	return err
}

// acceptNames sets crd's status.acceptedNames and NamesAccepted
// condition: the requested names, unless another CRD of the group has
// accepted one of them (then the names stay as they were and the
// condition says which name is taken).
func acceptNames(crd *apiextensionsv1.CustomResourceDefinition, all []apiextensionsv1.CustomResourceDefinition) {
	names := crd.Spec.Names
	taken := ""
	for i := range all {
		other := &all[i]
		if other.Name == crd.Name || other.Spec.Group != crd.Spec.Group {
			continue
		}
		on := other.Status.AcceptedNames
		switch {
		case names.Plural == on.Plural || names.Plural == on.Singular || slices.Contains(on.ShortNames, names.Plural):
			taken = names.Plural
		case names.Singular != "" && (names.Singular == on.Plural || names.Singular == on.Singular):
			taken = names.Singular
		case names.Kind == on.Kind || names.Kind == on.ListKind:
			taken = names.Kind
		case names.ListKind == on.ListKind || names.ListKind == on.Kind:
			taken = names.ListKind
		default:
			for _, sn := range names.ShortNames {
				if sn == on.Plural || sn == on.Singular || slices.Contains(on.ShortNames, sn) {
					taken = sn
				}
			}
		}
		if taken != "" {
			break
		}
	}
	if taken != "" {
		apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse,
			Reason: "NameConflict", Message: `"` + taken + `" is already in use`,
		})
		return
	}
	crd.Status.AcceptedNames = names
	apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue,
		Reason: "NoConflicts", Message: "no conflicts found",
	})
}

// crdOf is the CustomResourceDefinition a watch event carries. The watch
// cache wraps the objects of the events it dispatches as they happen
// (runtime.CacheableObject, so that watchers share their serializations);
// only events replayed from its history come bare. A wrapped object is
// shared and must not change, so the controller gets a copy.
func crdOf(obj runtime.Object) (*apiextensionsv1.CustomResourceDefinition, bool) {
	if c, ok := obj.(runtime.CacheableObject); ok {
		crd, ok := c.GetObject().(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return nil, false
		}
		return crd.DeepCopy(), true
	}
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	return crd, ok
}
