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
	"time"

	"github.com/sqlkube/sqlkube/internal/testcert"
)

// TestKubectl_Admission: a ValidatingAdmissionPolicy (at most 5
// replicas per Deployment) and a validating webhook (over TLS, its CA in
// caBundle, denying config maps named forbidden-*) deny through each
// kubectl, which shows their messages.
func TestKubectl_Admission(t *testing.T) {
	bins := kubectls(t)
	s := startServer(t, t.TempDir())
	hookURL, caBundle := denyWebhook(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "admission.yaml")
	writeFile(t, config, fmt.Sprintf(admissionObjects, hookURL, base64.StdEncoding.EncodeToString(caBundle)))
	s.mustKubectl(t, bins["kubectl"], "apply", "-f", config)

	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			ns := "e2e-admission-" + strings.ReplaceAll(name, ".", "-")
			s.mustKubectl(t, bin, "create", "namespace", ns)
			s.mustKubectl(t, bin, "label", "namespace", ns, "e2e-admission=on")
			deploy := filepath.Join(t.TempDir(), "deploy.yaml")
			writeDeployment(t, deploy, ns, 6, "busybox")
			wantPolicy := "ValidatingAdmissionPolicy 'e2e-max-replicas' with binding 'e2e-max-replicas' denied request: replicas must be at most 5"
			// The policy and the namespace's new label reach admission
			// through informers. Wait with server-side dry runs, which
			// pass admission but store nothing: a real apply let through
			// before then would create the Deployment, and every apply
			// after it would be "unchanged", sent to no one.
			var err error
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if _, err = s.kubectl(t, bin, "apply", "--dry-run=server", "-f", deploy); err != nil && strings.Contains(err.Error(), wantPolicy) {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), wantPolicy) {
				t.Fatalf("apply --dry-run=server a deployment of 6 replicas: %v, want %q", err, wantPolicy)
			}
			if _, err = s.kubectl(t, bin, "apply", "-f", deploy); err == nil || !strings.Contains(err.Error(), wantPolicy) {
				t.Fatalf("apply a deployment of 6 replicas: %v, want %q", err, wantPolicy)
			}
			writeDeployment(t, deploy, ns, 5, "busybox")
			s.mustKubectl(t, bin, "apply", "-f", deploy)

			wantHook := `admission webhook "deny.e2e.example.com" denied the request: names starting with forbidden are not allowed`
			_, err = s.kubectl(t, bin, "create", "configmap", "forbidden-1", "-n", ns)
			if err == nil || !strings.Contains(err.Error(), wantHook) {
				t.Fatalf("create configmap forbidden-1: %v, want %q", err, wantHook)
			}
			s.mustKubectl(t, bin, "create", "configmap", "allowed", "-n", ns)
		})
	}
}

const admissionObjects = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: e2e-max-replicas
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector:
      matchLabels: {e2e-admission: "on"}
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= 5
    message: replicas must be at most 5
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: e2e-max-replicas
spec:
  policyName: e2e-max-replicas
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: e2e-deny
webhooks:
- name: deny.e2e.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  namespaceSelector:
    matchLabels: {e2e-admission: "on"}
  rules:
  - apiGroups: [""]
    apiVersions: [v1]
    operations: [CREATE]
    resources: [configmaps]
  clientConfig:
    url: %s
    caBundle: %s
`

// denyWebhook serves AdmissionReview v1 over TLS on 127.0.0.1, denying
// objects named forbidden-*, and returns its URL and CA bundle.
func denyWebhook(t *testing.T) (string, []byte) {
	t.Helper()
	ca, cert := testcert.Serving(t, "127.0.0.1")
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review struct {
			APIVersion string         `json:"apiVersion"`
			Kind       string         `json:"kind"`
			Request    map[string]any `json:"request"`
			Response   map[string]any `json:"response,omitempty"`
		}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := map[string]any{"uid": review.Request["uid"], "allowed": true}
		if name, _ := review.Request["name"].(string); strings.HasPrefix(name, "forbidden") {
			resp["allowed"] = false
			resp["status"] = map[string]any{"code": 403, "message": "names starting with forbidden are not allowed"}
		}
		review.Request, review.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return hs.URL, ca
}
