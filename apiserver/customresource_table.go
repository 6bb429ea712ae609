package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// customTable prints custom resources with their CRD version's
// additionalPrinterColumns (NAME first, then the columns; NAME and AGE
// when the CRD declares none), rows carrying the object's metadata
// (includeObject=Metadata, the default), the object or nothing.
func (h *handler) customTable(obj runtime.Object) (*metav1.Table, error) {
	t, err := h.r.Custom.table.ConvertToTable(h.ctx, obj, nil)
	if err != nil {
		return nil, err
	}
	include := metav1.IncludeMetadata
	if v := h.c.QueryParam("includeObject"); v != "" {
		include = metav1.IncludeObjectPolicy(v)
	}
	for i := range t.Rows {
		row := &t.Rows[i]
		var err error
		if row.Object, err = rowObject(include, row.Object.Object); err != nil {
			return nil, err
		}
	}
	return t, nil
}
