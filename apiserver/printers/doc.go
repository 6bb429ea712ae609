// Package printers is server-side printing: the Table kubectl gets for
// each built-in kind, with the columns and cells kube-apiserver's own
// printers compute (Priority 1 columns are kubectl's -o wide).
package printers
