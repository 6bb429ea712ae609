package openapi

import (
	"reflect"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	// v2RefPrefix is the JSON pointer prefix of definitions in a Swagger 2.0 document.
	v2RefPrefix = "#/definitions/"
	// v3RefPrefix is the JSON pointer prefix of schemas in an OpenAPI 3 document.
	v3RefPrefix = "#/components/schemas/"
)

// definitionName returns the OpenAPI definition name Kubernetes uses for a
// named Go type: the package path with its first (domain) element reversed,
// slashes turned into dots, followed by the type name.
//
//	k8s.io/api/core/v1.Pod -> io.k8s.api.core.v1.Pod
func definitionName(t reflect.Type) string {
	return friendlyName(t.PkgPath() + "." + t.Name())
}

// friendlyName turns "k8s.io/api/core/v1.Pod" into "io.k8s.api.core.v1.Pod".
func friendlyName(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) > 0 && strings.Contains(parts[0], ".") {
		domain := strings.Split(parts[0], ".")
		for i, j := 0, len(domain)-1; i < j; i, j = i+1, j-1 {
			domain[i], domain[j] = domain[j], domain[i]
		}
		parts[0] = strings.Join(domain, ".")
	}
	return strings.Join(parts, ".")
}

// gvDocPath is the key of a group-version in the /openapi/v3 index:
// "api/v1" for the core group, "apis/GROUP/VERSION" otherwise.
func gvDocPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// gvURLPrefix is the URL prefix of a group-version's resources, e.g. "/api/v1".
func gvURLPrefix(gv schema.GroupVersion) string {
	return "/" + gvDocPath(gv)
}

// groupIdentifier is the group name as it appears in operation ids and
// tags: "core" for the legacy group, the ".k8s.io" suffix removed otherwise.
func groupIdentifier(group string) string {
	if group == "" {
		return "core"
	}
	return strings.TrimSuffix(group, ".k8s.io")
}

// operationPrefix returns the group-version part of an operation id, e.g.
// "CoreV1", "AppsV1", "RbacAuthorizationV1".
func operationPrefix(gv schema.GroupVersion) string {
	return camelIdentifier(groupIdentifier(gv.Group), true) + camelIdentifier(gv.Version, true)
}

// operationTag returns the tag upstream puts on every operation of a
// group-version, e.g. "core_v1", "apps_v1", "rbacAuthorization_v1".
func operationTag(gv schema.GroupVersion) string {
	return camelIdentifier(groupIdentifier(gv.Group), false) + "_" + gv.Version
}

// camelIdentifier removes punctuation from s and capitalises the letter that
// follows each removed character (and the first one when capitalizeFirst).
func camelIdentifier(s string, capitalizeFirst bool) string {
	var b strings.Builder
	upper := capitalizeFirst
	for i, r := range s {
		if unicode.IsLetter(r) || r == '_' || (i != 0 && unicode.IsDigit(r)) {
			if upper {
				r = unicode.ToUpper(r)
				upper = false
			}
			b.WriteRune(r)
		} else {
			upper = true
		}
	}
	return b.String()
}

// capitalize upper-cases the first letter of s ("status" -> "Status").
func capitalize(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}
