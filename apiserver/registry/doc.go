// Package registry is the table of served resources: for each, its kind,
// names, storage key and version, selectable fields, subresources and
// Kubernetes strategy (one file per group of resources), and the
// resources CustomResourceDefinitions define (CustomResource: schema,
// pruning, defaulting, validation, table columns, scale paths). Handlers
// serve whatever the Registry holds; Running is what a few resources ask
// of the running server at request time.
package registry
