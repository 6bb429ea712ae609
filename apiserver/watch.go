package apiserver

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	k8sstorage "k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
)

// maxWatchTimeout bounds a watch without timeoutSeconds (kube-apiserver
// picks 30-60 minutes; clients watch again).
const maxWatchTimeout = 30 * time.Minute

// watch streams events, one per chunk, until the client goes, timeoutSeconds pass or storage ends the
// watch (a 410 Gone or 429 ends it with an ERROR event carrying a Status).
func (h *handler) watch(opts metav1.ListOptions, pred k8sstorage.SelectionPredicate) error {
	timeout := maxWatchTimeout
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	key := h.r.listKey(h.info.Namespace)
	recursive := true
	if name, ok := pred.Field.RequiresExactMatch("metadata.name"); ok && h.info.Namespace != "" || !h.r.Namespaced && ok {
		key, recursive = h.r.key(h.info.Namespace, name), false
	}
	w, err := h.st.Watch(ctx, key, k8sstorage.ListOptions{
		ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch,
		Predicate: pred, Recursive: recursive, SendInitialEvents: opts.SendInitialEvents,
	})
	if err != nil {
		return h.fail(storeerr.InterpretListError(err, h.r.GroupResource()))
	}
	defer w.Stop()

	mediaOpts, info := negotiate(h.c)
	if info.StreamSerializer == nil {
		info, _ = runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	}
	asTable := mediaOpts.Convert != nil && mediaOpts.Convert.Kind == "Table"
	enc := Codecs.EncoderForVersion(info.Serializer, h.r.GroupVersion())
	if asTable {
		enc = Codecs.EncoderForVersion(info.Serializer, schema.GroupVersion{Group: metav1.GroupName, Version: mediaOpts.Convert.Version})
	}
	statusEnc := Codecs.EncoderForVersion(info.Serializer, metaGV)
	resp := h.c.Response()
	contentType := info.MediaType
	if contentType != runtime.ContentTypeJSON {
		contentType += ";stream=watch"
	}
	resp.Header().Set(echo.HeaderContentType, contentType)
	resp.WriteHeader(http.StatusOK)
	resp.Flush()
	// Each event is a metav1.WatchEvent framed for the encoding (JSON
	// objects one after the other, length-prefixed protobuf), its object
	// encoded on its own first.
	events := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(resp), info.StreamSerializer.Serializer)

	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.s.stopping:
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			obj, e := ev.Object, enc
			if ev.Type == watch.Error {
				e = statusEnc
			} else if asTable && ev.Type != watch.Bookmark {
				t, err := h.table(obj, mediaOpts)
				if err != nil {
					st := apierrors.NewInternalError(err).Status()
					obj, e, ev.Type = &st, statusEnc, watch.Error
				} else {
					if ev.Type != watch.Added {
						t.ColumnDefinitions = nil // sent with the first rows only, as upstream
					}
					obj = t
				}
			}
			buf.Reset()
			if err := e.Encode(obj, &buf); err != nil {
				st := apierrors.NewInternalError(err).Status()
				ev.Type = watch.Error
				buf.Reset()
				_ = statusEnc.Encode(&st, &buf)
			}
			if err := events.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: buf.Bytes()}}); err != nil {
				return nil
			}
			resp.Flush()
			if ev.Type == watch.Error {
				return nil
			}
		}
	}
}
