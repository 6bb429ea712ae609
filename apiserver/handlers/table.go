package handlers

import (
	"github.com/sqlkube/sqlkube/apiserver/printers"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// table prints obj (an object or a list) as the Table kubectl asked for:
// built-in resources with kube-apiserver's columns (printers), custom
// resources with their CRD version's additionalPrinterColumns (NAME
// first, then the columns; NAME and AGE when the CRD declares none). Rows
// carry the object's metadata (includeObject=Metadata, the default), the
// object or nothing.
func (h *Request) table(obj runtime.Object) (*metav1.Table, error) {
	include := metav1.IncludeMetadata
	if v := h.Echo.QueryParam("includeObject"); v != "" {
		include = metav1.IncludeObjectPolicy(v)
	}
	if h.Resource.Custom == nil {
		return printers.Table(obj, h.Resource.New(), include)
	}
	t, err := h.Resource.Custom.Table.ConvertToTable(h.Ctx, obj, nil)
	if err != nil {
		return nil, err
	}
	return t, printers.SetRowObjects(t, include)
}
