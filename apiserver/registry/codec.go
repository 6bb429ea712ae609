package registry

import (
	"io"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// viaInternal stores objects in another group's version (events.k8s.io/v1
// events as core/v1 events): Kubernetes converts between external versions
// only through the internal one, so objects go to the internal version,
// then to the storage version, and back.
type viaInternal struct {
	Storage runtime.Codec
	newObj  func() runtime.Object
}

// NewViaInternalCodec returns r's storage codec when r is stored in
// another version than it is served in.
func NewViaInternalCodec(r *Resource) (runtime.Codec, error) {
	internal := schema.GroupVersion{Group: r.StorageVersion.Group, Version: runtime.APIVersionInternal}
	codec, _, err := storage.NewStorageCodec(storage.StorageCodecConfig{
		StorageMediaType: runtime.ContentTypeProtobuf, StorageSerializer: legacyscheme.Codecs,
		StorageVersion: *r.StorageVersion, MemoryVersion: internal,
	})
	if err != nil {
		return nil, err
	}
	return &viaInternal{Storage: codec, newObj: r.New}, nil
}

func (c *viaInternal) Encode(obj runtime.Object, w io.Writer) error {
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return err
	}
	return c.Storage.Encode(in, w)
}

// Decode decodes into into, or into a new served-version object when into
// is nil (watch events).
func (c *viaInternal) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	in, _, err := c.Storage.Decode(data, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if into == nil {
		into = c.newObj()
	}
	if err := legacyscheme.Scheme.Convert(in, into, nil); err != nil {
		return nil, nil, err
	}
	gvks, _, err := legacyscheme.Scheme.ObjectKinds(into)
	if err != nil {
		return nil, nil, err
	}
	return into, &gvks[0], nil
}

func (c *viaInternal) Identifier() runtime.Identifier {
	return "sqlkube-via-internal-" + c.Storage.Identifier()
}
