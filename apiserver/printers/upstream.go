package printers

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/sqlkube/sqlkube/apiserver/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/printers"
	printersinternal "k8s.io/kubernetes/pkg/printers/internalversion"
)

// upstreamTables are kube-apiserver's own printers, which print internal
// objects: the types without a printer of sqlkube's own (table_*.go) are
// printed by them, on the internal version, with every column (kubectl
// hides those of priority 1 without -o wide), as kube-apiserver does.
var upstreamTables = printers.NewTableGenerator().With(printersinternal.AddHandlers)

// upstreamPrinters caches upstreamPrinter by type (reflect.Type ->
// *tablePrinter, nil when upstream has none).
var upstreamPrinters sync.Map

// upstreamPrinter is the printer of proto's type from upstreamTables.
func upstreamPrinter(proto runtime.Object) (tablePrinter, bool) {
	t := reflect.TypeOf(proto)
	if p, ok := upstreamPrinters.Load(t); ok {
		if p == (*tablePrinter)(nil) {
			return tablePrinter{}, false
		}
		return *p.(*tablePrinter), true
	}
	var found *tablePrinter
	if table, err := upstreamTable(proto); err == nil {
		found = &tablePrinter{
			columns: table.ColumnDefinitions,
			cells: func(obj runtime.Object) ([]any, bool) {
				if reflect.TypeOf(obj) != t {
					return nil, false
				}
				table, err := upstreamTable(obj)
				if err != nil || len(table.Rows) != 1 {
					return nil, false
				}
				return table.Rows[0].Cells, true
			},
			conditions: func(obj runtime.Object) []metav1.TableRowCondition {
				if table, err := upstreamTable(obj); err == nil && len(table.Rows) == 1 {
					return table.Rows[0].Conditions
				}
				return nil
			},
		}
	}
	upstreamPrinters.Store(t, found)
	if found == nil {
		return tablePrinter{}, false
	}
	return *found, true
}

// upstreamTable prints one object with upstreamTables (an error when its
// type has no internal version or no printer, or the printer fails).
func upstreamTable(obj runtime.Object) (table *metav1.Table, err error) {
	defer func() {
		if r := recover(); r != nil { // a printer meeting a field it expects set
			table, err = nil, fmt.Errorf("printing %T: %v", obj, r)
		}
	}()
	in, err := scheme.ToInternal(obj)
	if err != nil {
		return nil, err
	}
	return upstreamTables.GenerateTable(in, printers.GenerateOptions{Wide: true})
}
