package handlers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sync"

	"github.com/sqlkube/sqlkube/apiserver/responses"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// encodedItems keeps the JSON of a resource's objects by uid and
// resourceVersion, so a LIST writes what it wrote before instead of
// encoding every object again (objects never change at a resourceVersion).
// The bytes are exactly what encoding the whole list at once gives.
type encodedItems struct {
	mu sync.Mutex
	m  map[types.UID]encodedItem
}

type encodedItem struct {
	resourceVersion string
	json            []byte
}

// maxEncodedItems bounds a resource's cache; beyond it the cache starts
// over (stale versions of updated objects go with it).
const maxEncodedItems = 50_000

func (c *encodedItems) get(uid types.UID, rv string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[uid]; ok && e.resourceVersion == rv {
		return e.json
	}
	return nil
}

func (c *encodedItems) put(uid types.UID, rv string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxEncodedItems {
		c.m = make(map[types.UID]encodedItem)
	}
	c.m[uid] = encodedItem{resourceVersion: rv, json: b}
}

// emptyItems ends the JSON of a list whose items were left out.
var emptyItems = []byte(`"items":[]}`)

// writeJSONList writes a typed list (TypeMeta, ListMeta, Items: the shape
// of every Kubernetes list) as JSON in gvk, taking each item's encoding
// from cache when it has the item's resourceVersion. It reports false,
// having written nothing, for anything else.
// start is called once, before the first byte is written.
func writeJSONList(start func() io.Writer, list runtime.Object, gvk schema.GroupVersionKind, cache *encodedItems) (bool, error) {
	v := reflect.ValueOf(list)
	if cache == nil || v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false, nil
	}
	items := v.Elem().FieldByName("Items")
	if !items.IsValid() || items.Kind() != reflect.Slice || items.Type().Elem().Kind() != reflect.Struct || items.Len() == 0 {
		// Empty lists keep the codec's encoding (nil items are null).
		return false, nil
	}
	// The list without its items gives everything before them.
	head := reflect.New(v.Elem().Type())
	head.Elem().Set(v.Elem())
	head.Elem().FieldByName("Items").Set(reflect.MakeSlice(items.Type(), 0, 0))
	headObj := head.Interface().(runtime.Object)
	headObj.GetObjectKind().SetGroupVersionKind(gvk)
	headJSON, err := json.Marshal(headObj)
	if err != nil || !bytes.HasSuffix(headJSON, emptyItems) {
		return false, err
	}
	bw := bufio.NewWriterSize(start(), 64<<10)
	bw.Write(headJSON[:len(headJSON)-2]) // up to and including "items":[
	for i := 0; i < items.Len(); i++ {
		item := items.Index(i).Addr().Interface()
		m, err := meta.Accessor(item)
		if err != nil {
			return true, err
		}
		b := cache.get(m.GetUID(), m.GetResourceVersion())
		if b == nil {
			if b, err = json.Marshal(item); err != nil {
				return true, err
			}
			if m.GetUID() != "" && m.GetResourceVersion() != "" {
				cache.put(m.GetUID(), m.GetResourceVersion(), b)
			}
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(b)
	}
	bw.WriteString("]}\n")
	return true, bw.Flush()
}

// respondList answers a list: JSON lists of built-in types from the
// encoded-items cache, anything else (other encodings, Table, custom
// resources) as respond does.
func (h *Request) respondList(list runtime.Object) error {
	opts, info := responses.Negotiate(h.Echo)
	if opts.Convert == nil && info.MediaType == runtime.ContentTypeJSON && h.Resource.Custom == nil {
		cache, _ := h.API.encoded.LoadOrStore(h.Resource, &encodedItems{})
		start := func() io.Writer {
			h.Echo.Response().Header().Set("Content-Type", runtime.ContentTypeJSON)
			h.Echo.Response().WriteHeader(http.StatusOK)
			return h.Echo.Response()
		}
		ok, err := writeJSONList(start, list, h.Resource.GVK.GroupVersion().WithKind(h.Resource.GVK.Kind+"List"), cache.(*encodedItems))
		if ok {
			return err
		}
		if err != nil {
			return h.Fail(err)
		}
	}
	return h.respond(http.StatusOK, list)
}
