package printers

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/sqlkube/sqlkube/apiserver/responses"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Server-side printing. Table turns objects into the Table kubectl prints;
// the per-kind printers (columns, and cells computed as kube-apiserver's
// printers compute them) live in core.go, apps.go, batch.go, groups.go,
// storage.go and upstream.go. Columns of Priority 1 are the ones kubectl
// shows only with -o wide.

// Table converts an object or list to the Table kubectl prints: the
// columns kubectl shows for the type, rows carrying the object's metadata
// (include Metadata, the default), the whole object (Object) or nothing
// (None). empty is a new object of the list's kind: an empty list's
// columns are those of its kind.
func Table(obj, empty runtime.Object, include metav1.IncludeObjectPolicy) (*metav1.Table, error) {
	items, proto := []runtime.Object{obj}, obj
	t := &metav1.Table{}
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return nil, err
		}
		proto = empty
		if lm, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion, t.Continue, t.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
		}
	} else if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	p := printerFor(proto)
	t.ColumnDefinitions = slices.Clone(p.columns)
	for _, item := range items {
		cells, ok := p.cells(item)
		if !ok {
			return nil, fmt.Errorf("cannot print a %T as a table of %T", item, proto)
		}
		row := metav1.TableRow{Cells: cells}
		if p.conditions != nil {
			row.Conditions = p.conditions(item)
		}
		var err error
		if row.Object, err = rowObject(include, item); err != nil {
			return nil, err
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// SetRowObjects sets what the rows of a table printed elsewhere (custom
// resources') carry of their objects under include.
func SetRowObjects(t *metav1.Table, include metav1.IncludeObjectPolicy) error {
	for i := range t.Rows {
		row := &t.Rows[i]
		var err error
		if row.Object, err = rowObject(include, row.Object.Object); err != nil {
			return err
		}
	}
	return nil
}

// tablePrinter prints one Go type: its columns, the cells of an object
// (one per column, in order) and, optionally, row conditions.
type tablePrinter struct {
	columns    []metav1.TableColumnDefinition
	cells      func(runtime.Object) ([]any, bool)
	conditions func(runtime.Object) []metav1.TableRowCondition
}

// printerOf makes the printer of the objects of type T.
func printerOf[T runtime.Object](columns []metav1.TableColumnDefinition, cells func(T) []any) tablePrinter {
	return tablePrinter{columns: columns, cells: func(obj runtime.Object) ([]any, bool) {
		o, ok := obj.(T)
		if !ok {
			return nil, false
		}
		return cells(o), true
	}}
}

// tablePrinters are the printers by object type, gathered from the per-group
// lists.
var tablePrinters = func() map[reflect.Type]tablePrinter {
	byType := map[reflect.Type]tablePrinter{}
	for _, group := range [][]printerEntry{corePrinters(), storagePrinters(), appsPrinters(), batchPrinters(), groupPrinters()} {
		for _, e := range group {
			byType[reflect.TypeOf(e.prototype)] = e.printer
		}
	}
	return byType
}()

// printerEntry names the type a printer is for by an instance of it.
type printerEntry struct {
	prototype runtime.Object
	printer   tablePrinter
}

// defaultPrinter is NAME AGE, for any kind without its own printer.
var defaultPrinter = tablePrinter{
	columns: []metav1.TableColumnDefinition{nameColumn, ageColumn},
	cells: func(obj runtime.Object) ([]any, bool) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return []any{"", "<unknown>"}, true
		}
		return []any{m.GetName(), translateAge(m.GetCreationTimestamp())}, true
	},
}

func printerFor(obj runtime.Object) tablePrinter {
	if p, ok := tablePrinters[reflect.TypeOf(obj)]; ok {
		return p
	}
	if p, ok := upstreamPrinter(obj); ok {
		return p
	}
	return defaultPrinter
}

// Column definitions.

var (
	nameColumn = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: "Name of the object, unique within its namespace (or the cluster)."}
	ageColumn  = metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "Time since the object was created."}
)

func stringColumn(name, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "string", Description: description}
}

func integerColumn(name, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "integer", Description: description}
}

// wide makes a column one kubectl shows only with -o wide.
func wide(c metav1.TableColumnDefinition) metav1.TableColumnDefinition {
	c.Priority = 1
	return c
}

// Cell formatting shared by the printers.

const (
	cellNone    = "<none>"
	cellUnknown = "<unknown>"
)

// translateAge is a timestamp as the age kubectl shows: "5m", "3d".
func translateAge(t metav1.Time) string {
	if t.IsZero() {
		return cellUnknown
	}
	return duration.HumanDuration(time.Since(t.Time))
}

func translateMicroAge(t metav1.MicroTime) string {
	if t.IsZero() {
		return cellUnknown
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// orNone is s, or "<none>" when s is empty.
func orNone(s string) string {
	if s == "" {
		return cellNone
	}
	return s
}

// containerCells are the CONTAINERS and IMAGES cells of a pod template.
func containerCells(containers []corev1.Container) (names, images string) {
	n, i := make([]string, len(containers)), make([]string, len(containers))
	for k, c := range containers {
		n[k], i[k] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(i, ",")
}

// labelSelectorCell is a label selector as kubectl shows it ("<none>" when
// it selects everything).
func labelSelectorCell(s *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "<error>"
	}
	return orNone(sel.String())
}

// int32Or is *p, or def when p is nil (a field the API would have defaulted).
func int32Or(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// rowObject is what a table row carries of its object under
// includeObject: nothing, its metadata (PartialObjectMetadata) or all of
// it.
func rowObject(include metav1.IncludeObjectPolicy, item runtime.Object) (runtime.RawExtension, error) {
	switch include {
	case metav1.IncludeObject:
		return runtime.RawExtension{Object: item}, nil
	case metav1.IncludeMetadata:
		m, err := meta.Accessor(item)
		if err != nil {
			return runtime.RawExtension{}, err
		}
		partial := &metav1.PartialObjectMetadata{ObjectMeta: *responses.ObjectMeta(m)}
		partial.APIVersion, partial.Kind = metav1.SchemeGroupVersion.String(), "PartialObjectMetadata"
		return runtime.RawExtension{Object: partial}, nil
	}
	return runtime.RawExtension{}, nil
}
