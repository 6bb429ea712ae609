package subresources

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/handlers"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	policyv1beta1 "k8s.io/api/policy/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// maxDisruptedPods bounds a budget's status.disruptedPods (Kubernetes'
// MaxDisruptedPodSize): beyond it evictions are refused until the
// disruption controller catches up.
const maxDisruptedPods = 2000

const evictionDenied = "Cannot evict pod as it would violate the pod's disruption budget."

var pdbGVR = policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")

// evict serves POST pods/NAME/eviction with a policy/v1 (or v1beta1)
// Eviction, as kube-apiserver does:
//   - a pod that is pending, terminal or already being deleted is deleted
//     without looking at disruption budgets;
//   - otherwise the budgets in the pod's namespace whose selector matches
//     it are found: none, the pod is deleted; more than one, 500; one whose
//     status has not caught up with its spec (observedGeneration <
//     generation) or allows no disruption, 429 with a DisruptionBudget
//     cause; else status.disruptionsAllowed is decremented (retried on
//     conflict, re-checked each time) and the pod recorded in
//     status.disruptedPods before the pod is deleted;
//   - a pod that is not Ready is deleted without spending the budget when
//     its unhealthyPodEvictionPolicy is AlwaysAllow or the budget has its
//     desired healthy pods (on the pod version seen, 429 if it changed).
//
// The pod gets a DisruptionTarget condition and is deleted with the
// Eviction's DeleteOptions (a bound pod waits its grace period). The
// answer is a Status with code 201.
func evict(h *handlers.Request) error {
	var opts metav1.CreateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	obj, err := h.DecodeAs(policyv1.SchemeGroupVersion.WithKind("Eviction"), policyv1beta1.SchemeGroupVersion.WithKind("Eviction"))
	if err != nil {
		return h.Fail(err)
	}
	// Admission sees a create of pods/eviction, kind Eviction (in the
	// version sent).
	kind := policyv1.SchemeGroupVersion.WithKind("Eviction")
	if _, ok := obj.(*policyv1beta1.Eviction); ok {
		kind = policyv1beta1.SchemeGroupVersion.WithKind("Eviction")
	}
	h.AdmittingAs(kind, &opts, opts.DryRun)
	if obj, err = h.AdmitMutate(admission.Create, obj, nil); err != nil {
		return h.Fail(err)
	}
	var name string
	var del *metav1.DeleteOptions
	switch e := obj.(type) {
	case *policyv1.Eviction:
		name, del = e.Name, e.DeleteOptions
	case *policyv1beta1.Eviction:
		name, del = e.Name, e.DeleteOptions
	}
	if name != h.Info.Name {
		return h.Fail(apierrors.NewBadRequest("name in URL does not match name in Eviction object"))
	}
	if err := h.AdmitValidate(admission.Create, obj, nil); err != nil {
		return h.Fail(err)
	}
	// A node evicts only pods bound to it.
	if err := h.AdmitNodeWrite(admission.Create, obj, nil, name); err != nil {
		return h.Fail(err)
	}
	if del == nil {
		del = &metav1.DeleteOptions{}
	}
	switch {
	case len(del.DryRun) == 0:
		del.DryRun = opts.DryRun
	case len(opts.DryRun) > 0 && !slices.Equal(del.DryRun, opts.DryRun):
		return h.Fail(apierrors.NewBadRequest(fmt.Sprintf("Non-matching dry-run options in request and content: %v and %v", opts.DryRun, del.DryRun)))
	}
	if errs := metav1validation.ValidateDeleteOptions(del); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs))
	}

	pod := &corev1.Pod{}
	if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, pod); err != nil {
		return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	if canIgnoreBudget(pod) {
		return evictPod(h, *del, nil, "")
	}
	pdbs, err := podBudgets(h, pod)
	if err != nil {
		return h.Fail(err)
	}
	switch {
	case len(pdbs) == 0:
		return evictPod(h, *del, nil, "")
	case len(pdbs) > 1:
		return responses.Object(h.Echo, http.StatusInternalServerError, &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
		}, scheme.MetaGV)
	}
	pdb := pdbs[0]
	if !podReady(pod) {
		always := pdb.Spec.UnhealthyPodEvictionPolicy != nil && *pdb.Spec.UnhealthyPodEvictionPolicy == policyv1.AlwaysAllow
		if always || (pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0) {
			// The pod does not count as healthy: deleting it disrupts
			// nothing, provided it has not become ready meanwhile.
			return evictPod(h, *del, &pod.ResourceVersion, pdb.Name)
		}
	}
	if err := spendBudget(h, pdb, pod.Name, handlers.IsDryRun(del.DryRun)); err != nil {
		return h.Fail(err)
	}
	return evictPod(h, *del, nil, "")
}

// canIgnoreBudget: evicting a pod that is not running, or is already going,
// disrupts nothing more.
func canIgnoreBudget(pod *corev1.Pod) bool {
	switch pod.Status.Phase {
	case corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed:
		return true
	}
	return pod.DeletionTimestamp != nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podBudgets returns the disruption budgets of pod's namespace whose
// selector matches it (a budget without a selector matches nothing, an
// empty one everything, an invalid one nothing).
func podBudgets(h *handlers.Request, pod *corev1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	r, ok := h.API.Registry.Lookup(pdbGVR)
	if !ok {
		return nil, nil
	}
	list := &policyv1.PodDisruptionBudgetList{}
	if err := h.API.Storages[r].GetList(h.Ctx, r.ListKey(pod.Namespace), k8sstorage.ListOptions{Predicate: k8sstorage.Everything, Recursive: true}, list); err != nil {
		return nil, storeerr.InterpretListError(err, r.GroupResource())
	}
	var out []*policyv1.PodDisruptionBudget
	for i := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(list.Items[i].Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// spendBudget takes one disruption from pdb's status (429 if it has none)
// and records the pod as disrupted; a conflicting write re-reads the
// budget and checks again. Dry run only checks.
func spendBudget(h *handlers.Request, pdb *policyv1.PodDisruptionBudget, podName string, dryRun bool) error {
	r, _ := h.API.Registry.Lookup(pdbGVR)
	key := r.Key(pdb.Namespace, pdb.Name)
	if dryRun {
		return checkBudget(pdb)
	}
	err := h.API.Storages[r].GuaranteedUpdate(h.Ctx, key, &policyv1.PodDisruptionBudget{}, false, nil, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
		cur := existing.(*policyv1.PodDisruptionBudget).DeepCopy()
		if err := checkBudget(cur); err != nil {
			return nil, nil, err
		}
		cur.Status.DisruptionsAllowed--
		if cur.Status.DisruptedPods == nil {
			cur.Status.DisruptedPods = map[string]metav1.Time{}
		}
		cur.Status.DisruptedPods[podName] = metav1.NewTime(time.Now())
		if cur.Status.DisruptionsAllowed == 0 {
			setBudgetExhausted(cur)
		}
		return cur, nil, nil
	}, nil)
	if err != nil {
		return storeerr.InterpretUpdateError(err, r.GroupResource(), pdb.Name)
	}
	return nil
}

// checkBudget reports why pdb allows no eviction now (nil if it allows one).
func checkBudget(pdb *policyv1.PodDisruptionBudget) error {
	gr := policyv1.Resource("poddisruptionbudget")
	switch {
	case pdb.Status.ObservedGeneration < pdb.Generation:
		return budgetDenied(10, fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdb.Name))
	case pdb.Status.DisruptionsAllowed < 0:
		return apierrors.NewForbidden(gr, pdb.Name, fmt.Errorf("pdb disruptions allowed is negative"))
	case len(pdb.Status.DisruptedPods) > maxDisruptedPods:
		return apierrors.NewForbidden(gr, pdb.Name, fmt.Errorf("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
	case pdb.Status.DisruptionsAllowed == 0:
		return budgetDenied(0, fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy))
	}
	return nil
}

// budgetDenied is the 429 an eviction gets when a budget stops it.
func budgetDenied(retryAfter int, cause string) error {
	err := apierrors.NewTooManyRequests(evictionDenied, retryAfter)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: cause})
	return err
}

// setBudgetExhausted sets the DisruptionAllowed=False condition a budget
// has once it allows no more disruptions.
func setBudgetExhausted(pdb *policyv1.PodDisruptionBudget) {
	c := metav1.Condition{
		Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse, Reason: policyv1.InsufficientPodsReason,
		ObservedGeneration: pdb.Status.ObservedGeneration, LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second)),
	}
	for i := range pdb.Status.Conditions {
		if pdb.Status.Conditions[i].Type == c.Type {
			if pdb.Status.Conditions[i].Status == c.Status {
				c.LastTransitionTime = pdb.Status.Conditions[i].LastTransitionTime
			}
			pdb.Status.Conditions[i] = c
			return
		}
	}
	pdb.Status.Conditions = append(pdb.Status.Conditions, c)
}

// evictPod marks the pod DisruptionTarget and deletes it with opts. With
// seenRV (and no resourceVersion precondition of the caller's) both
// writes require that pod version, and a changed pod is a 429 naming
// pdbName so that the client retries.
func evictPod(h *handlers.Request, opts metav1.DeleteOptions, seenRV *string, pdbName string) error {
	callerRV := opts.Preconditions != nil && opts.Preconditions.ResourceVersion != nil
	pre := &k8sstorage.Preconditions{}
	if opts.Preconditions != nil {
		pre.UID, pre.ResourceVersion = opts.Preconditions.UID, opts.Preconditions.ResourceVersion
	}
	if seenRV != nil && !callerRV {
		pre.ResourceVersion = seenRV
	}
	conflict := func(err error) error {
		if seenRV != nil && !callerRV && apierrors.IsConflict(err) {
			return budgetDenied(10, fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdbName))
		}
		return err
	}
	if !handlers.IsDryRun(opts.DryRun) {
		out := &corev1.Pod{}
		err := h.Store.GuaranteedUpdate(h.Ctx, h.Key(), out, false, pre, func(existing runtime.Object, _ k8sstorage.ResponseMeta) (runtime.Object, *uint64, error) {
			pod := existing.(*corev1.Pod).DeepCopy()
			setPodCondition(&pod.Status, corev1.PodCondition{
				Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting",
			})
			return pod, nil, nil
		}, nil)
		if err != nil {
			return h.Fail(conflict(storeerr.InterpretUpdateError(err, h.Resource.GroupResource(), h.Info.Name)))
		}
		if pre.ResourceVersion != nil {
			rv := out.ResourceVersion // our own write moved it
			pre.ResourceVersion = &rv
		}
	} else if pre.UID != nil || pre.ResourceVersion != nil {
		pod := &corev1.Pod{}
		if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, pod); err != nil {
			return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		if err := pre.Check(h.Key(), pod); err != nil {
			return h.Fail(conflict(storeerr.InterpretDeleteError(err, h.Resource.GroupResource(), h.Info.Name)))
		}
	}
	if !handlers.IsDryRun(opts.DryRun) {
		if _, err := h.GracefulDelete(opts, pre, nil); err != nil {
			return h.Fail(conflict(err))
		}
	}
	return responses.Object(h.Echo, http.StatusCreated, &metav1.Status{Status: metav1.StatusSuccess, Code: http.StatusCreated}, scheme.MetaGV)
}
