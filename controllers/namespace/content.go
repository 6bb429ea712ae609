package namespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/retry"
)

// RemainingError says a namespace's content is still going (finalizers
// or grace periods); look again after Wait.
type RemainingError struct {
	Wait time.Duration
	// Remaining describes what is left ("configmaps has 2 resource
	// instances").
	Remaining []string
}

func (e *RemainingError) Error() string {
	return fmt.Sprintf("content remains, checking again in %s: %s", e.Wait, strings.Join(e.Remaining, ", "))
}

func asRemaining(err error, target **RemainingError) bool { return errors.As(err, target) }

// result is what one pass over a namespace's content found.
type result struct {
	discoveryErr error
	parseErrs    []string
	deleteErrs   []string
	remaining    []string       // "configmaps has 2 resource instances"
	finalizers   map[string]int // finalizer -> objects holding it
	wait         time.Duration  // longest grace period still running
}

// deleteContent deletes every object of every namespaced resource
// discovery lists that can be listed and deleted, records the outcome as
// the namespace's deletion conditions, and returns an error while
// anything failed or remains.
func (c *Controller) deleteContent(ctx context.Context, ns *corev1.Namespace) error {
	res := result{finalizers: map[string]int{}}
	lists, err := c.opts.Discover()
	if err != nil {
		res.discoveryErr = err // partial results still get deleted
	}
	for _, gvr := range deletableResources(lists, &res) {
		c.deleteResource(ctx, ns.Name, gvr, &res)
	}
	if err := c.setConditions(ctx, ns, &res); err != nil {
		return err
	}
	switch {
	case res.discoveryErr != nil:
		return fmt.Errorf("discovery failed for some groups: %w", res.discoveryErr)
	case len(res.parseErrs) > 0 || len(res.deleteErrs) > 0:
		return fmt.Errorf("failed to delete all resource types: %s", strings.Join(append(res.parseErrs, res.deleteErrs...), "; "))
	case len(res.remaining) > 0:
		wait := c.opts.RemainingDelay
		if res.wait > 0 && res.wait < wait && len(res.finalizers) == 0 {
			wait = res.wait
		}
		return &RemainingError{Wait: wait, Remaining: res.remaining}
	}
	return nil
}

// deletableResources are the resources of lists that support list and
// delete (subresources aside), in a stable order.
func deletableResources(lists []*metav1.APIResourceList, res *result) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			res.parseErrs = append(res.parseErrs, fmt.Sprintf("%s: %v", l.GroupVersion, err))
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") ||
				!(slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "deletecollection")) {
				continue
			}
			out = append(out, gv.WithResource(r.Name))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// deleteResource deletes a namespace's objects of one resource (a
// deletecollection, or one delete each when that is not served) and notes
// what is left.
func (c *Controller) deleteResource(ctx context.Context, ns string, gvr schema.GroupVersionResource, res *result) {
	client := c.opts.Metadata.Resource(gvr).Namespace(ns)
	background := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &background}
	err := client.DeleteCollection(ctx, opts, metav1.ListOptions{})
	if apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err) {
		err = nil
		list, lerr := client.List(ctx, metav1.ListOptions{})
		if lerr != nil && !apierrors.IsNotFound(lerr) {
			err = lerr
		}
		for i := 0; lerr == nil && i < len(list.Items); i++ {
			if derr := client.Delete(ctx, list.Items[i].Name, opts); derr != nil && !apierrors.IsNotFound(derr) {
				err = derr
			}
		}
	}
	if err != nil {
		res.deleteErrs = append(res.deleteErrs, fmt.Sprintf("%s: %v", gvr.GroupResource(), err))
		return
	}
	left, err := client.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		res.deleteErrs = append(res.deleteErrs, fmt.Sprintf("%s: %v", gvr.GroupResource(), err))
		return
	}
	if len(left.Items) == 0 {
		return
	}
	res.remaining = append(res.remaining, fmt.Sprintf("%s has %d resource instances", gvr.GroupResource(), len(left.Items)))
	for _, item := range left.Items {
		for _, f := range item.Finalizers {
			res.finalizers[f]++
		}
		if g := item.DeletionGracePeriodSeconds; g != nil && item.DeletionTimestamp != nil {
			if wait := time.Until(item.DeletionTimestamp.Time) + time.Second; wait > res.wait {
				res.wait = wait
			}
		}
	}
}

// setConditions records a pass's outcome as the namespace's deletion
// conditions (the five Kubernetes sets), updating the status only when
// they change.
func (c *Controller) setConditions(ctx context.Context, ns *corev1.Namespace, res *result) error {
	now := metav1.Now()
	cond := func(t corev1.NamespaceConditionType, bad bool, badReason, badMsg, okReason, okMsg string) corev1.NamespaceCondition {
		if bad {
			return corev1.NamespaceCondition{Type: t, Status: corev1.ConditionTrue, Reason: badReason, Message: badMsg, LastTransitionTime: now}
		}
		return corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, Reason: okReason, Message: okMsg, LastTransitionTime: now}
	}
	var finalizers []string
	for f, n := range res.finalizers {
		finalizers = append(finalizers, fmt.Sprintf("%s in %d resource instances", f, n))
	}
	sort.Strings(finalizers)
	discoveryMsg := ""
	if res.discoveryErr != nil {
		discoveryMsg = fmt.Sprintf("Discovery failed for some groups: %v", res.discoveryErr)
		var gdErr *discovery.ErrGroupDiscoveryFailed
		if errors.As(res.discoveryErr, &gdErr) {
			discoveryMsg = fmt.Sprintf("Discovery failed for some groups, %d failing: %v", len(gdErr.Groups), gdErr)
		}
	}
	want := []corev1.NamespaceCondition{
		cond(corev1.NamespaceDeletionDiscoveryFailure, res.discoveryErr != nil, "DiscoveryFailed", discoveryMsg,
			"ResourcesDiscovered", "All resources successfully discovered"),
		cond(corev1.NamespaceDeletionGVParsingFailure, len(res.parseErrs) > 0, "GroupVersionParsingFailed",
			fmt.Sprintf("Failed to parse some group versions: %s", strings.Join(res.parseErrs, ", ")),
			"ParsedGroupVersions", "All legacy kube types successfully parsed"),
		cond(corev1.NamespaceDeletionContentFailure, len(res.deleteErrs) > 0, "ContentDeletionFailed",
			fmt.Sprintf("Failed to delete all resource types, %d remaining: %s", len(res.deleteErrs), strings.Join(res.deleteErrs, ", ")),
			"ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
		cond(corev1.NamespaceContentRemaining, len(res.remaining) > 0, "SomeResourcesRemain",
			fmt.Sprintf("Some resources are remaining: %s", strings.Join(res.remaining, ", ")),
			"ContentRemoved", "All content successfully removed"),
		cond(corev1.NamespaceFinalizersRemaining, len(finalizers) > 0, "SomeFinalizersRemain",
			fmt.Sprintf("Some content in the namespace has finalizers remaining: %s", strings.Join(finalizers, ", ")),
			"ContentHasNoFinalizers", "All content-preserving finalizers finished"),
	}
	updated := ns.DeepCopy()
	changed := false
	for _, w := range want {
		i := slices.IndexFunc(updated.Status.Conditions, func(c corev1.NamespaceCondition) bool { return c.Type == w.Type })
		switch {
		case i < 0:
			updated.Status.Conditions = append(updated.Status.Conditions, w)
			changed = true
		case updated.Status.Conditions[i].Status != w.Status:
			updated.Status.Conditions[i] = w
			changed = true
		case updated.Status.Conditions[i].Reason != w.Reason || updated.Status.Conditions[i].Message != w.Message:
			w.LastTransitionTime = updated.Status.Conditions[i].LastTransitionTime
			updated.Status.Conditions[i] = w
			changed = true
		}
	}
	if !changed {
		return nil
	}
	_, err := c.opts.Client.CoreV1().Namespaces().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // conditions are advisory; the next pass writes them
	}
	return err
}

// finalize removes the "kubernetes" finalizer from the namespace's spec
// (retried on conflict) and then deletes it, which removes it once no
// finalizer is left.
func (c *Controller) finalize(ctx context.Context, name string) error {
	nss := c.opts.Client.CoreV1().Namespaces()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ns, err := nss.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !hasFinalizer(ns) {
			return nil
		}
		ns.Spec.Finalizers = slices.DeleteFunc(ns.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
		_, err = nss.Finalize(ctx, ns, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := nss.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
