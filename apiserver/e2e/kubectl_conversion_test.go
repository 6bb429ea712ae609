package e2e

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlkube/sqlkube/internal/testcert"
)

// TestKubectl_ConversionWebhook: a CRD with versions v1 (spec.color,
// stored) and v2 (spec.colour) and a conversion webhook in the test
// process: with each kubectl, an object created at v1 reads at v2 with
// the field renamed, and one changed at v2 reads back at v1.
func TestKubectl_ConversionWebhook(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	url, caBundle := renamingConversionWebhook(t)
	dir := t.TempDir()
	crd := filepath.Join(dir, "crd.yaml")
	writeFile(t, crd, fmt.Sprintf(conversionCRD, url, base64.StdEncoding.EncodeToString(caBundle)))
	s.mustKubectl(t, bins["kubectl"], "apply", "-f", crd)
	s.mustKubectl(t, bins["kubectl"], "wait", "--for=condition=Established", "crd/gadgets.conversion.e2e.example.com", "--timeout=60s")

	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			obj := "gadget-" + strings.ReplaceAll(name, ".", "-")
			manifest := filepath.Join(t.TempDir(), "gadget.yaml")
			writeFile(t, manifest, fmt.Sprintf("apiVersion: conversion.e2e.example.com/v1\nkind: Gadget\nmetadata: {name: %s, namespace: default}\nspec: {color: blue}\n", obj))
			s.mustKubectl(t, bin, "apply", "-f", manifest)
			if got := s.mustKubectl(t, bin, "get", "gadgets.v2.conversion.e2e.example.com", obj, "-o", "jsonpath={.apiVersion} {.spec.colour}"); got != "conversion.e2e.example.com/v2 blue" {
				t.Fatalf("read at v2: %q", got)
			}
			s.mustKubectl(t, bin, "patch", "gadgets.v2.conversion.e2e.example.com", obj, "--type=merge", "-p", `{"spec":{"colour":"red"}}`)
			if got := s.mustKubectl(t, bin, "get", "gadgets.v1.conversion.e2e.example.com", obj, "-o", "jsonpath={.apiVersion} {.spec.color}"); got != "conversion.e2e.example.com/v1 red" {
				t.Fatalf("read at v1 after a patch at v2: %q", got)
			}
			out := s.mustKubectl(t, bin, "get", "gadgets.v2.conversion.e2e.example.com", "-o", "jsonpath={range .items[*]}{.spec.colour},{end}")
			if !strings.Contains(out, "red,") {
				t.Fatalf("list at v2: %q", out)
			}
		})
	}
}

const conversionCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.conversion.e2e.example.com}
spec:
  group: conversion.e2e.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {color: {type: string}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {colour: {type: string}}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        url: %s
        caBundle: %s
`

// renamingConversionWebhook converts ConversionReview v1 requests over
// TLS on 127.0.0.1, renaming spec.color (v1) to spec.colour (v2) and
// back, and returns its URL and CA.
func renamingConversionWebhook(t *testing.T) (string, []byte) {
	t.Helper()
	ca, cert := testcert.Serving(t, "127.0.0.1")
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Request    *struct {
				UID               string           `json:"uid"`
				DesiredAPIVersion string           `json:"desiredAPIVersion"`
				Objects           []map[string]any `json:"objects"`
			} `json:"request,omitempty"`
			Response map[string]any `json:"response,omitempty"`
		}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not a ConversionReview", http.StatusBadRequest)
			return
		}
		from, to := "color", "colour"
		if strings.HasSuffix(review.Request.DesiredAPIVersion, "/v1") {
			from, to = "colour", "color"
		}
		converted := []any{}
		for _, obj := range review.Request.Objects {
			if spec, ok := obj["spec"].(map[string]any); ok {
				if v, ok := spec[from]; ok {
					spec[to] = v
					delete(spec, from)
				}
			}
			obj["apiVersion"] = review.Request.DesiredAPIVersion
			converted = append(converted, obj)
		}
		review.Response = map[string]any{"uid": review.Request.UID, "convertedObjects": converted, "result": map[string]any{"status": "Success"}}
		review.Request = nil
		writeJSONResponse(w, review)
	}))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return hs.URL + "/convert", ca
}
