package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/registry"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/request"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// isDryRun reports whether a request asked not to persist (dryRun=All;
// the options' validation rejects anything else).
func IsDryRun(dryRun []string) bool { return len(dryRun) > 0 }

// maxBodyBytes is the largest request body accepted (413 beyond).
const maxBodyBytes = 3 << 20

// serve answers a request for r, which the router found and whose
// path it checked, with the REST verb or subresource the request asks
// for.
func (s *API) Serve(c echo.Context, r *registry.Resource, info *request.RequestInfo) error {
	ctx := request.WithRequestInfo(request.WithNamespace(c.Request().Context(), info.Namespace), info)
	h := &Request{API: s, Resource: r, Store: s.storageFor(r), Info: info, Echo: c, Ctx: ctx}
	// As kube-apiserver's REST handlers do, answer 406 before doing
	// anything when the Accept header offers nothing the answer can be
	// written in (subresources with handlers of their own, the connect
	// ones among them, are left to those).
	if _, own := s.Subresources.Lookup(r, info.Subresource); !own {
		if _, _, err := h.negotiate(); err != nil {
			return h.Fail(err)
		}
	}
	if r.CreateOnly != nil {
		return h.serveCreateOnly() // reviews.go
	}
	if r.Computed != nil {
		return h.serveComputed() // componentstatuses.go
	}
	if info.Subresource == "scale" {
		return s.Scale(h)
	}
	if served, err := h.serveSubresource(); served {
		return err
	}
	// The object's own subresources (status, pods' ephemeralcontainers...)
	// are read and written whole, as kube-apiserver serves them.
	if info.Subresource != "" && info.Verb != "get" && info.Verb != "update" && info.Verb != "patch" {
		return h.Fail(apierrors.NewMethodNotSupported(schema.GroupResource{Group: r.GVK.Group, Resource: r.Plural + "/" + info.Subresource}, info.Verb))
	}
	switch info.Verb {
	case "get":
		return h.get()
	case "list":
		return h.list(false)
	case "watch":
		return h.list(true)
	case "create":
		return h.create()
	case "update":
		return h.update()
	case "patch":
		return h.patch()
	case "delete":
		return h.delete()
	case "deletecollection":
		return h.deleteCollection()
	}
	return responses.Status(c, apierrors.NewMethodNotSupported(r.GroupResource(), info.Verb))
}

// handler serves one request on one resource.
type Request struct {
	API      *API
	Resource *registry.Resource
	Store    k8sstorage.Interface
	Info     *request.RequestInfo
	Echo     echo.Context
	Ctx      context.Context
	// applying: managedFields are set by server-side apply, not tracked
	// as an update.
	applying bool
	// adm is what admission is told of a write (admission.go).
	adm admissionRequest
	// media is the answer's encoding, negotiated once (negotiate).
	media *negotiated
}

// negotiated is the outcome of negotiating the Accept header.
type negotiated struct {
	opts negotiation.MediaTypeOptions
	info runtime.SerializerInfo
	err  error
}

// negotiate picks the answer's encoding from the Accept header within
// what the resource allows (a 406 error when nothing offered is), once
// per request.
func (h *Request) negotiate() (negotiation.MediaTypeOptions, runtime.SerializerInfo, error) {
	if h.media == nil {
		opts, info, err := responses.NegotiateFor(h.Echo, h.restrictions())
		h.media = &negotiated{opts, info, err}
	}
	return h.media.opts, h.media.info, h.media.err
}

// Key is the storage key of the object the request names.
func (h *Request) Key() string { return h.Resource.Key(h.Info.Namespace, h.Info.Name) }

// restrictions are the transformations h's answer may take: every
// resource but the virtual create-only ones (the reviews, which
// kube-apiserver serves without a table convertor) prints as a Table.
func (h *Request) restrictions() responses.Restrictions {
	return responses.Restrictions{Table: h.Resource.CreateOnly == nil}
}

func (h *Request) respond(code int, obj runtime.Object) error {
	opts, info, err := h.negotiate()
	if err != nil {
		return h.Fail(err)
	}
	if opts.Convert != nil && opts.Convert.Kind == "Table" {
		table, err := h.table(obj)
		if err != nil {
			return responses.Status(h.Echo, err)
		}
		return responses.Encode(h.Echo, code, table, schema.GroupVersion{Group: metav1.GroupName, Version: opts.Convert.Version}, info)
	}
	if opts.Convert != nil && strings.HasPrefix(opts.Convert.Kind, "PartialObjectMetadata") {
		partial, err := responses.PartialMetadata(obj, opts.Convert)
		if err != nil {
			return responses.Status(h.Echo, err)
		}
		return responses.Encode(h.Echo, code, partial, opts.Convert.GroupVersion(), info)
	}
	return responses.Encode(h.Echo, code, obj, h.Resource.GroupVersion(), info)
}

// Fail answers err as a Status.
func (h *Request) Fail(err error) error {
	return responses.Status(h.Echo, err)
}

func (h *Request) get() error {
	var opts metav1.GetOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	obj := h.Resource.New()
	if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{ResourceVersion: opts.ResourceVersion}, obj); err != nil {
		return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
	}
	return h.respond(http.StatusOK, obj)
}

// listOptions decodes and checks a list or watch request's options.
func (h *Request) listOptions() (metav1.ListOptions, k8sstorage.SelectionPredicate, error) {
	var opts metav1.ListOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return opts, k8sstorage.SelectionPredicate{}, apierrors.NewBadRequest(err.Error())
	}
	label, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return opts, k8sstorage.SelectionPredicate{}, apierrors.NewBadRequest("invalid labelSelector: " + err.Error())
	}
	field, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return opts, k8sstorage.SelectionPredicate{}, apierrors.NewBadRequest("invalid fieldSelector: " + err.Error())
	}
	// Only fields the resource exposes may be selected on, as upstream.
	probeFields := fields.Set{"metadata.name": "", "metadata.namespace": ""}
	if h.Resource.Fields != nil {
		for k := range h.Resource.Fields(h.Resource.New()) {
			probeFields[k] = ""
		}
	}
	for _, req := range field.Requirements() {
		if _, ok := probeFields[req.Field]; !ok {
			return opts, k8sstorage.SelectionPredicate{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	pred := k8sstorage.SelectionPredicate{
		Label: label, Field: field, GetAttrs: h.Resource.Attrs,
		Limit: opts.Limit, Continue: opts.Continue, AllowWatchBookmarks: opts.AllowWatchBookmarks,
	}
	if h.Resource.GroupResource().Resource == "pods" {
		pred.IndexFields = []string{"spec.nodeName"}
	}
	return opts, pred, nil
}

func (h *Request) list(watching bool) error {
	opts, pred, err := h.listOptions()
	if err != nil {
		return h.Fail(err)
	}
	if err := validateListOptions(opts, watching || opts.Watch); err != nil {
		return h.Fail(err)
	}
	if watching || opts.Watch {
		return h.watch(opts, pred)
	}
	list := h.Resource.NewList()
	if err := h.Store.GetList(h.Ctx, h.Resource.ListKey(h.Info.Namespace), k8sstorage.ListOptions{
		ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch,
		Predicate: pred, Recursive: true,
	}, list); err != nil {
		return h.Fail(storeerr.InterpretListError(err, h.Resource.GroupResource()))
	}
	return h.respondList(list)
}

// readBody reads the request body: 400 if it cannot be read, 413 beyond
// maxBodyBytes.
func (h *Request) ReadBody() ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(h.Echo.Request().Body, maxBodyBytes+1))
	if err != nil {
		return nil, apierrors.NewBadRequest("reading the request body: " + err.Error())
	}
	if len(body) > maxBodyBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", maxBodyBytes))
	}
	return body, nil
}

// decodeBody reads and decodes a request body into a new object of the
// resource, checking its kind; unknown and duplicate fields follow the
// fieldValidation directive.
func (h *Request) decodeBody() (runtime.Object, error) {
	req := h.Echo.Request()
	body, err := h.ReadBody()
	if err != nil {
		return nil, err
	}
	mediaType := req.Header.Get(echo.HeaderContentType)
	if mediaType == "" {
		mediaType = runtime.ContentTypeJSON
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), strings.TrimSpace(strings.Split(mediaType, ";")[0]))
	if h.Resource.Custom != nil && info.MediaType == runtime.ContentTypeProtobuf {
		ok = false // custom resources have no protobuf encoding
	}
	if !ok {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType, Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s", strings.Join(supportedMediaTypes(), ", ")),
		}}
	}
	obj := h.Resource.New()
	decoder := scheme.Codecs.DecoderToVersion(h.bodySerializer(info), h.Resource.GroupVersion())
	out, gvk, err := decoder.Decode(body, &h.Resource.GVK, obj)
	if strict, ok := runtime.AsStrictDecodingError(err); ok && out != nil {
		// Unknown or duplicate fields: fieldvalidation.go.
		err = h.strictFields(strict.Errors(), h.decodeStrictError(gvk))
		if err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body of the request could not be decoded: %v", err))
	}
	if *gvk != h.Resource.GVK {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s) or kind %s", gvk.GroupVersion(), h.Resource.GroupVersion(), h.Resource.GVK.Kind))
	}
	// Fields a custom resource's schema does not know are pruned, and
	// follow fieldValidation as unknown fields do.
	if err := h.strictFields(h.Resource.Custom.Prune(out), h.decodeStrictError(gvk)); err != nil {
		return nil, err
	}
	return out, nil
}

func (h *Request) create() error {
	var opts metav1.CreateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	if errs := metav1validation.ValidateCreateOptions(&opts); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "CreateOptions"}, "", errs))
	}
	h.admitting(&opts, opts.DryRun)
	obj, err := h.decodeBody()
	if err != nil {
		return h.Fail(err)
	}
	m, _ := meta.Accessor(obj)
	if h.Resource.Namespaced && m.GetNamespace() != "" && m.GetNamespace() != h.Info.Namespace {
		return h.Fail(apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
	}
	out, err := h.createObject(obj)
	if err != nil {
		return h.Fail(err)
	}
	return h.respond(http.StatusCreated, out)
}

func (h *Request) update() error {
	var opts metav1.UpdateOptions
	if err := scheme.ParameterCodec.DecodeParameters(h.Echo.Request().URL.Query(), scheme.MetaGV, &opts); err != nil {
		return h.Fail(apierrors.NewBadRequest(err.Error()))
	}
	if errs := metav1validation.ValidateUpdateOptions(&opts); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "UpdateOptions"}, "", errs))
	}
	h.admitting(&opts, opts.DryRun)
	obj, err := h.decodeBody()
	if err != nil {
		return h.Fail(err)
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() != h.Info.Name {
		return h.Fail(apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), h.Info.Name)))
	}
	if h.Resource.Namespaced {
		if m.GetNamespace() != "" && m.GetNamespace() != h.Info.Namespace {
			return h.Fail(apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request"))
		}
		m.SetNamespace(h.Info.Namespace)
	}
	// A PUT of a missing object creates it where the resource allows.
	return h.upsert(h.allowCreateOnUpdate(), func() (runtime.Object, error) { return obj.DeepCopyObject(), nil },
		func(existing runtime.Object) (runtime.Object, *uint64, error) {
			return h.prepareUpdate(existing, obj.DeepCopyObject())
		})
}

// prepareNew sets what the server owns on a new object and validates
// it (prepareCreate runs it between the admission plugins).
func (h *Request) prepareNew(obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if errs := validateObjectMeta(m, h.Resource); len(errs) > 0 {
		return nil, apierrors.NewInvalid(h.Resource.GVK.GroupKind(), m.GetName(), errs)
	}
	// System fields first: strategies may read them (a job's selector is
	// made from its uid).
	m.SetUID(types.UID(uuid.NewString()))
	m.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	m.SetResourceVersion("")
	m.SetGeneration(0)
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	scheme.Default(obj)
	if h.Resource.EffectiveStrategy() == nil {
		// No Kubernetes strategy: generation for types with a spec, and
		// the resource's own preparation.
		if hasSpec(obj) {
			m.SetGeneration(1)
		}
		if h.Resource.PrepareForCreate != nil {
			h.Resource.PrepareForCreate(obj)
		}
		if h.Resource.Admit != nil {
			if err := h.Resource.Admit(h.Ctx, obj, nil); err != nil {
				return nil, err
			}
		}
		return obj, nil
	}
	res, err := registry.StrategyCreate(h.Ctx, h.Resource, obj)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(res.Errs) > 0 {
		return nil, apierrors.NewInvalid(h.Resource.GVK.GroupKind(), m.GetName(), res.Errs)
	}
	h.warnAll(res.Warnings)
	if err := h.API.Authz.CheckEscalation(h.Ctx, h.Resource.GroupResource(), res.Obj, nil); err != nil {
		return nil, err
	}
	return res.Obj, nil
}

// prepareChanged makes the object to store from the existing one and the
// update: a stale resourceVersion is a conflict, system fields are kept,
// the main resource keeps the stored status and the status subresource
// changes only the status; generation moves when anything else changes
// (prepareUpdate runs it between the admission plugins).
func (h *Request) prepareChanged(existing, updated runtime.Object) (_ runtime.Object, _ *uint64, err error) {
	oldMeta, _ := meta.Accessor(existing)
	newMeta, _ := meta.Accessor(updated)
	if rv := newMeta.GetResourceVersion(); rv != "" && rv != oldMeta.GetResourceVersion() {
		return nil, nil, apierrors.NewConflict(h.Resource.GroupResource(), h.Info.Name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	if newMeta.GetResourceVersion() == "" {
		// An unconditional update: allowed where Kubernetes allows it,
		// against the object as it is now.
		if st := h.Resource.EffectiveStrategy(); st != nil && !st.AllowUnconditionalUpdate(h.Ctx) && !h.applying {
			return nil, nil, apierrors.NewInvalid(h.Resource.GVK.GroupKind(), h.Info.Name, field.ErrorList{
				field.Invalid(field.NewPath("metadata", "resourceVersion"), "", "must be specified for an update")})
		}
		newMeta.SetResourceVersion(oldMeta.GetResourceVersion())
	}
	scheme.Default(updated)
	if h.Info.Subresource != "" {
		return h.prepareStatus(existing, updated)
	}
	if h.Resource.Status {
		if err := copyField(existing, updated, "Status"); err != nil {
			return nil, nil, err
		}
	}
	// A service's addresses, as kube-apiserver's BeginUpdate: kept when
	// omitted, claimed or given back when the type changes.
	finish, err := h.beginServiceUpdate(updated, existing)
	if err != nil {
		return nil, nil, err
	}
	done := false
	defer func() { finish(done) }()
	keepNamespaceFinalizers(existing, updated)
	newMeta.SetUID(oldMeta.GetUID())
	newMeta.SetCreationTimestamp(oldMeta.GetCreationTimestamp())
	newMeta.SetDeletionTimestamp(oldMeta.GetDeletionTimestamp())
	newMeta.SetDeletionGracePeriodSeconds(oldMeta.GetDeletionGracePeriodSeconds())
	newMeta.SetGeneration(oldMeta.GetGeneration())
	// Kubernetes' strategies move generation themselves.
	if h.Resource.EffectiveStrategy() == nil && SpecChanged(existing, updated) {
		newMeta.SetGeneration(oldMeta.GetGeneration() + 1)
	}
	if errs := validateObjectMeta(newMeta, h.Resource); len(errs) > 0 {
		return nil, nil, apierrors.NewInvalid(h.Resource.GVK.GroupKind(), newMeta.GetName(), errs)
	}
	if updated, err = h.runUpdateStrategy("", existing, updated); err != nil {
		return nil, nil, err
	}
	if err := h.API.Authz.CheckEscalation(h.Ctx, h.Resource.GroupResource(), updated, existing); err != nil {
		return nil, nil, err
	}
	if h.Resource.Admit != nil {
		if err := h.Resource.Admit(h.Ctx, updated, existing); err != nil {
			return nil, nil, err
		}
	}
	if !h.applying {
		updated = h.trackManagedFields(existing, updated)
	}
	done = true
	return updated, nil, nil
}

// prepareStatus makes the object a write to the status subresource (or
// approval, or another of the resource's ObjectSubresources) stores.
// Where Kubernetes has a strategy for it, the written object goes through
// it whole and its PrepareForUpdate decides what the write may change (a
// Deployment's status write keeps its annotations and not its labels or
// spec; a pod's ephemeralcontainers write only its ephemeral containers),
// as kube-apiserver's subresource stores do; without one (custom
// resources) only the status is taken.
func (h *Request) prepareStatus(existing, updated runtime.Object) (runtime.Object, *uint64, error) {
	var merged runtime.Object
	if registry.UpdateStrategy(h.Resource, h.Info.Subresource) != nil {
		merged = updated
		oldMeta, _ := meta.Accessor(existing)
		newMeta, _ := meta.Accessor(merged)
		// What rest.BeforeUpdate keeps around a strategy.
		newMeta.SetGeneration(oldMeta.GetGeneration())
		if newMeta.GetUID() == "" {
			newMeta.SetUID(oldMeta.GetUID())
		}
		newMeta.SetCreationTimestamp(oldMeta.GetCreationTimestamp())
		newMeta.SetDeletionTimestamp(oldMeta.GetDeletionTimestamp())
		newMeta.SetDeletionGracePeriodSeconds(oldMeta.GetDeletionGracePeriodSeconds())
		if errs := validateObjectMeta(newMeta, h.Resource); len(errs) > 0 {
			return nil, nil, apierrors.NewInvalid(h.Resource.GVK.GroupKind(), newMeta.GetName(), errs)
		}
	} else {
		merged = existing.DeepCopyObject()
		if err := copyField(updated, merged, "Status"); err != nil {
			return nil, nil, err
		}
		if h.applying {
			if err := copyManagedFields(updated, merged); err != nil {
				return nil, nil, err
			}
		}
	}
	merged, err := h.runUpdateStrategy(h.Info.Subresource, existing, merged)
	if err != nil {
		return nil, nil, err
	}
	if h.Resource.Admit != nil {
		if err := h.Resource.Admit(h.Ctx, merged, existing); err != nil {
			return nil, nil, err
		}
	}
	if !h.applying {
		merged = h.trackManagedFields(existing, merged)
	}
	return merged, nil, nil
}

func (h *Request) delete() error {
	opts := metav1.DeleteOptions{}
	if err := h.decodeDeleteOptions(&opts); err != nil {
		return h.Fail(err)
	}
	if errs := metav1validation.ValidateDeleteOptions(&opts); len(errs) > 0 {
		return h.Fail(apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "DeleteOptions"}, "", errs))
	}
	if err := h.admitDelete(&opts); err != nil {
		return h.Fail(err)
	}
	if err := h.AdmitNodeWrite(admission.Delete, nil, nil, h.Info.Name); err != nil {
		return h.Fail(err)
	}
	var pre *k8sstorage.Preconditions
	if opts.Preconditions != nil {
		pre = &k8sstorage.Preconditions{UID: opts.Preconditions.UID, ResourceVersion: opts.Preconditions.ResourceVersion}
	}
	if IsDryRun(opts.DryRun) {
		existing := h.Resource.New()
		if err := h.Store.Get(h.Ctx, h.Key(), k8sstorage.GetOptions{}, existing); err != nil {
			return h.Fail(storeerr.InterpretGetError(err, h.Resource.GroupResource(), h.Info.Name))
		}
		if pre != nil {
			if err := pre.Check(h.Key(), existing); err != nil {
				return h.Fail(storeerr.InterpretDeleteError(err, h.Resource.GroupResource(), h.Info.Name))
			}
		}
		if err := h.validateDelete(h.Ctx, existing); err != nil {
			return h.Fail(err)
		}
		return h.respond(http.StatusOK, existing)
	}
	out, err := h.GracefulDelete(opts, pre, h.validateDelete)
	if err != nil {
		return h.Fail(err)
	}
	return h.respond(http.StatusOK, out)
}

// decodeDeleteOptions reads DeleteOptions from the body or, if there is
// none, from the query.
func (h *Request) decodeDeleteOptions(opts *metav1.DeleteOptions) error {
	req := h.Echo.Request()
	body, err := h.ReadBody()
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if _, _, err := scheme.Codecs.UniversalDecoder(metav1.SchemeGroupVersion).Decode(body, nil, opts); err != nil {
			// Older clients send DeleteOptions without a kind.
			if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(), body, opts); err != nil {
				return apierrors.NewBadRequest("invalid DeleteOptions: " + err.Error())
			}
		}
		return nil
	}
	// Only without a body, as kube-apiserver: decoding the query would
	// reset what the body set (dryRun, say).
	if err := scheme.ParameterCodec.DecodeParameters(req.URL.Query(), scheme.MetaGV, opts); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// supportedMediaTypes lists the encodings request bodies may use.
func supportedMediaTypes() []string {
	var out []string
	for _, info := range scheme.Codecs.SupportedMediaTypes() {
		out = append(out, info.MediaType)
	}
	return out
}

// Negotiated is the encoding the request's Accept header asks for.
func Negotiated(h *Request) runtime.SerializerInfo {
	_, info, err := h.negotiate()
	if err != nil {
		_, info = responses.Negotiate(h.Echo) // JSON when nothing is acceptable
	}
	return info
}
