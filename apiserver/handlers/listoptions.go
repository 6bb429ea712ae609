package handlers

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// validateListOptions checks the combinations of a list's or watch's
// options as kube-apiserver does, with the WatchList feature on: a watch
// with sendInitialEvents must ask for resourceVersionMatch=NotOlderThan,
// resourceVersionMatch needs sendInitialEvents on a watch and a
// resourceVersion on a list, and a list cannot send initial events. 422
// Invalid on ListOptions otherwise.
func validateListOptions(opts metav1.ListOptions, watching bool) error {
	in := internalversion.ListOptions{
		ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch,
		Watch: watching, AllowWatchBookmarks: opts.AllowWatchBookmarks, SendInitialEvents: opts.SendInitialEvents,
		Limit: opts.Limit, Continue: opts.Continue, TimeoutSeconds: opts.TimeoutSeconds,
	}
	if errs := validation.ValidateListOptions(&in, true); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	return nil
}
