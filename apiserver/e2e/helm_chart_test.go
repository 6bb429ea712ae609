package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// writeHelmChart writes the test's chart into a temp dir and returns its
// path. Its values name the aggregated backend (the test process at ip,
// port, serving with ca, whose certificate names api.wardle.svc: the
// release goes to namespace wardle).
//
// The chart's APIService is backed by a server that answers: the
// test's aggregated backend (kubectl_aggregation_test.go) behind a
// Service without a selector and an EndpointSlice naming it, both in the
// chart. An APIService whose Service has no endpoints would not stop
// helm: it is never Available, aggregated discovery lists its version
// Stale, so client-go's ServerGroupsAndResources reports that group's
// discovery as failed, which helm (v3 and v4 alike) lets pass. Tried by
// hand: install, upgrade and uninstall succeed, helm says nothing of it
// (not even with --debug), the audit log has no 5xx, and .Capabilities
// just lacks the group's kinds. But that shows helm putting up with a
// broken APIService, not an APIService working. With a backend, the
// test holds the server to more: the APIService goes Available, its
// group is served and discoverable after each of helm's writes to it (a
// three-way merge patch from v3, server-side apply from v4), and helm's
// own discovery lists its kind (the Deployment's annotation, rendered
// from .Capabilities).
func writeHelmChart(t *testing.T, ip string, port int, ca []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sqlkube-e2e")
	files := map[string]string{
		"Chart.yaml":                helmChartYAML,
		"values.yaml":               fmt.Sprintf(helmValuesYAML, ip, port, base64.StdEncoding.EncodeToString(ca)),
		"templates/web.yaml":        helmWebTemplate,
		"templates/aggregated.yaml": helmAggregatedTemplate,
		"templates/hook.yaml":       helmHookTemplate,
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, content)
	}
	return dir
}

const helmChartYAML = `apiVersion: v2
name: sqlkube-e2e
description: sqlkube's end-to-end test chart
type: application
version: 0.1.0
appVersion: "1"
`

const helmValuesYAML = `replicas: 2
greeting: hello
image: registry.e2e.example.com/web:1
aggregated:
  ip: %[1]q
  port: %[2]d
  caBundle: %[3]q
`

// helmWebTemplate: a Deployment and a Service that selects its pods.
// The Deployment's annotation tells whether helm's discovery found the
// aggregated group's kind.
const helmWebTemplate = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
  labels:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: {{ .Release.Name }}
  annotations:
    e2e.sqlkube.io/flunders-discovered: {{ .Capabilities.APIVersions.Has "wardle.e2e.example.com/v1alpha1/Flunder" | quote }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels:
      app.kubernetes.io/name: web
      app.kubernetes.io/instance: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: web
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      containers:
        - name: web
          image: {{ .Values.image }}
          env:
            - name: GREETING
              value: {{ .Values.greeting | quote }}
          ports:
            - name: http
              containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}-web
  labels:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  selector:
    app.kubernetes.io/name: web
    app.kubernetes.io/instance: {{ .Release.Name }}
  ports:
    - name: http
      port: 80
      targetPort: http
`

// helmAggregatedTemplate: an APIService for wardle.e2e.example.com
// served by a backend outside the cluster, reached through a Service
// without a selector and an EndpointSlice that names the backend. The
// Service is named as the backend's certificate says (api, in the
// release's namespace).
const helmAggregatedTemplate = `apiVersion: v1
kind: Service
metadata:
  name: api
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  ports:
    - name: https
      port: 443
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
    kubernetes.io/service-name: api
addressType: IPv4
endpoints:
  - addresses: [{{ .Values.aggregated.ip | quote }}]
    conditions:
      ready: true
ports:
  - name: https
    port: {{ .Values.aggregated.port }}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1alpha1.wardle.e2e.example.com
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  group: wardle.e2e.example.com
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service:
    name: api
    namespace: {{ .Release.Namespace }}
    port: 443
  caBundle: {{ .Values.aggregated.caBundle }}
`

// helmHookTemplate: a Job run after install, upgrade and rollback. On
// simulated nodes a Job's pod succeeds a second after it starts
// (node/fake.JobPodRuntime), so helm, which waits for a hook Job to
// complete, goes on; it deletes the Job once it has succeeded, and any
// left from an earlier run before making it again.
const helmHookTemplate = `apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-hook
  labels:
    app.kubernetes.io/instance: {{ .Release.Name }}
  annotations:
    helm.sh/hook: post-install,post-upgrade,post-rollback
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .Release.Name }}
    spec:
      restartPolicy: Never
      containers:
        - name: hook
          image: {{ .Values.image }}
          command: ["true"]
`
