package handlers

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/sqlkube/sqlkube/apiserver/responses"
	"github.com/sqlkube/sqlkube/apiserver/scheme"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/metrics"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// maxWatchTimeout bounds a watch without timeoutSeconds (kube-apiserver
// picks 30-60 minutes; clients watch again).
const maxWatchTimeout = 30 * time.Minute

// watch streams events, one per chunk (or one per message over a
// websocket), until the client goes, timeoutSeconds pass or storage ends
// the watch (a 410 Gone or 429 ends it with an ERROR event carrying a
// Status).
func (h *Request) watch(opts metav1.ListOptions, pred k8sstorage.SelectionPredicate) error {
	timeout := maxWatchTimeout
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(h.Ctx, timeout)
	defer cancel()
	key := h.Resource.ListKey(h.Info.Namespace)
	recursive := true
	if name, ok := pred.Field.RequiresExactMatch("metadata.name"); ok && h.Info.Namespace != "" || !h.Resource.Namespaced && ok {
		key, recursive = h.Resource.Key(h.Info.Namespace, name), false
	}
	w, err := h.Store.Watch(ctx, key, k8sstorage.ListOptions{
		ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch,
		Predicate: pred, Recursive: recursive, SendInitialEvents: opts.SendInitialEvents,
	})
	if err != nil {
		return h.Fail(storeerr.InterpretListError(err, h.Resource.GroupResource()))
	}
	defer w.Stop()

	enc := h.newWatchEncoding()
	if wsstream.IsWebSocketRequest(h.Echo.Request()) {
		return h.watchWebsocket(ctx, w, enc) // watch_websocket.go
	}
	resp := h.Echo.Response()
	contentType := enc.info.MediaType
	if contentType != runtime.ContentTypeJSON {
		contentType += ";stream=watch"
	}
	resp.Header().Set(echo.HeaderContentType, contentType)
	resp.WriteHeader(http.StatusOK)
	resp.Flush()
	// Each event is a metav1.WatchEvent framed for the encoding (JSON
	// objects one after the other, length-prefixed protobuf).
	events := streaming.NewEncoder(enc.info.StreamSerializer.Framer.NewFrameWriter(resp), enc.info.StreamSerializer.Serializer)
	return h.streamEvents(ctx, w, enc, func(ev *metav1.WatchEvent) error {
		if err := events.Encode(ev); err != nil {
			return err
		}
		resp.Flush()
		return nil
	})
}

// watchEncoding is how a watch's events are encoded: the negotiated
// serializer, objects in the resource's version or as Table rows.
type watchEncoding struct {
	info        runtime.SerializerInfo
	mediaOpts   negotiation.MediaTypeOptions
	obj, status runtime.Encoder
	asTable     bool
	// asMetadata: objects as PartialObjectMetadata (the metadata client).
	asMetadata *schema.GroupVersionKind
}

func (h *Request) newWatchEncoding() watchEncoding {
	mediaOpts, info := responses.Negotiate(h.Echo)
	if info.StreamSerializer == nil {
		info, _ = runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	}
	e := watchEncoding{info: info, mediaOpts: mediaOpts, asTable: mediaOpts.Convert != nil && mediaOpts.Convert.Kind == "Table"}
	e.obj = scheme.Codecs.EncoderForVersion(info.Serializer, h.Resource.GroupVersion())
	if e.asTable {
		e.obj = scheme.Codecs.EncoderForVersion(info.Serializer, schema.GroupVersion{Group: metav1.GroupName, Version: mediaOpts.Convert.Version})
	}
	if c := mediaOpts.Convert; c != nil && c.Kind == "PartialObjectMetadata" {
		e.asMetadata = c
		e.obj = scheme.Codecs.EncoderForVersion(info.Serializer, c.GroupVersion())
	}
	e.status = scheme.Codecs.EncoderForVersion(info.Serializer, scheme.MetaGV)
	return e
}

// streamEvents hands each event of w to send as a metav1.WatchEvent, its
// object encoded on its own first, until the client goes (send fails),
// ctx ends (timeoutSeconds), the server stops or storage ends the watch.
// An ERROR event (a 410 Gone or 429 Status) is the last one sent.
//
// Each event sent is counted in Kubernetes' apiserver_watch_events_total
// and apiserver_watch_events_sizes (the size of the event's encoded
// object), and the end of a watch-list's initial events
// (sendInitialEvents) in apiserver_watch_list_duration_seconds, as
// kube-apiserver's watch handler does.
func (h *Request) streamEvents(ctx context.Context, w watch.Interface, enc watchEncoding, send func(*metav1.WatchEvent) error) error {
	start := time.Now()
	gvr := schema.GroupVersionResource{Group: h.Info.APIGroup, Version: h.Info.APIVersion, Resource: h.Info.Resource}
	sent := metrics.WatchEvents.WithContext(ctx).WithLabelValues(gvr.Group, gvr.Version, gvr.Resource)
	sizes := metrics.WatchEventsSizes.WithContext(ctx).WithLabelValues(gvr.Group, gvr.Version, gvr.Resource)
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.API.Stopping:
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			obj, e := ev.Object, enc.obj
			if ev.Type == watch.Error {
				e = enc.status
			} else if enc.asTable && ev.Type != watch.Bookmark {
				t, err := h.table(obj)
				if err != nil {
					st := apierrors.NewInternalError(err).Status()
					obj, e, ev.Type = &st, enc.status, watch.Error
				} else {
					if ev.Type != watch.Added {
						t.ColumnDefinitions = nil // sent with the first rows only, as upstream
					}
					obj = t
				}
			} else if enc.asMetadata != nil {
				p, err := responses.PartialMetadata(obj, enc.asMetadata)
				if err != nil {
					st := apierrors.NewInternalError(err).Status()
					obj, e, ev.Type = &st, enc.status, watch.Error
				} else {
					obj = p
				}
			}
			buf.Reset()
			if err := e.Encode(obj, &buf); err != nil {
				st := apierrors.NewInternalError(err).Status()
				ev.Type = watch.Error
				buf.Reset()
				_ = enc.status.Encode(&st, &buf)
			}
			initialEventsEnd := ev.Type == watch.Bookmark && isInitialEventsEnd(ev.Object)
			if err := send(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: buf.Bytes()}}); err != nil {
				return nil
			}
			sent.Inc()
			sizes.Observe(float64(buf.Len()))
			if initialEventsEnd {
				metrics.RecordWatchListLatency(ctx, gvr, metrics.CleanScope(h.Info), time.Since(start))
			}
			if ev.Type == watch.Error {
				return nil
			}
		}
	}
}

// isInitialEventsEnd reports whether a bookmark ends a watch-list's
// initial events.
func isInitialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}
