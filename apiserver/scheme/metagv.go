package scheme

import "k8s.io/apimachinery/pkg/runtime/schema"

// MetaGV is the version meta.k8s.io's option and discovery types are
// decoded and encoded in (v1, as for the core group).
var MetaGV = schema.GroupVersion{Version: "v1"}
