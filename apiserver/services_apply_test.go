package apiserver_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// serviceManifests are the Services each way of creating is tried with,
// as JSON with the name left to fill in.
var serviceManifests = map[string]string{
	"clusterip": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s","labels":{"app":"web"}},
		"spec":{"selector":{"app":"web"},"ports":[{"name":"http","port":80,"targetPort":8080}]}}`,
	"nodeport": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},
		"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80},{"name":"https","port":443}]}}`,
	"headless": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},
		"spec":{"clusterIP":"None","selector":{"app":"web"},"ports":[{"port":80}]}}`,
	"headless-selectorless": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},
		"spec":{"clusterIP":"None","ports":[{"port":80}]}}`,
	"prefer-dual-stack": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},
		"spec":{"ipFamilyPolicy":"PreferDualStack","selector":{"app":"web"},"ports":[{"port":80}]}}`,
	"loadbalancer": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},
		"spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","selector":{"app":"web"},"ports":[{"port":80}]}}`,
	"externalname": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"%s"},
		"spec":{"type":"ExternalName","externalName":"example.com"}}`,
}

func serviceManifest(t *testing.T, kind, name string) []byte {
	t.Helper()
	return []byte(strings.Replace(serviceManifests[kind], "%s", name, 1))
}

// comparableService is svc with what differs between two creations of
// the same manifest set aside: identity, timestamps, managedFields and
// the allocated values (checked on their own).
func comparableService(svc *corev1.Service) *corev1.Service {
	out := svc.DeepCopy()
	out.ObjectMeta = metav1.ObjectMeta{Labels: out.Labels, Annotations: out.Annotations, Namespace: out.Namespace}
	if out.Spec.ClusterIP != corev1.ClusterIPNone {
		out.Spec.ClusterIP, out.Spec.ClusterIPs = "", nil
	}
	for i := range out.Spec.Ports {
		out.Spec.Ports[i].NodePort = 0
	}
	out.Spec.HealthCheckNodePort = 0
	return out
}

// checkAllocated fails unless svc has what its type needs, inside the
// server's ranges.
func checkAllocated(t *testing.T, svc *corev1.Service) {
	t.Helper()
	_, serviceNet, _ := net.ParseCIDR("10.96.0.0/12")
	inRange := func(p int32) bool { return p >= 30000 && p <= 32767 }
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		if svc.Spec.ClusterIP != "" || len(svc.Spec.IPFamilies) != 0 {
			t.Fatalf("%s: an ExternalName service got %q %v", svc.Name, svc.Spec.ClusterIP, svc.Spec.IPFamilies)
		}
		return
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		if len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != corev1.ClusterIPNone {
			t.Fatalf("%s: headless clusterIPs %v", svc.Name, svc.Spec.ClusterIPs)
		}
	default:
		ip := net.ParseIP(svc.Spec.ClusterIP)
		if ip == nil || !serviceNet.Contains(ip) || len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != svc.Spec.ClusterIP {
			t.Fatalf("%s: cluster IP %q, clusterIPs %v", svc.Name, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
		}
	}
	// One family on this IPv4 cluster; a headless service without a
	// selector is RequireDualStack with both, as kube-apiserver makes it
	// (its endpoints come from elsewhere and may be of either).
	families := []corev1.IPFamily{corev1.IPv4Protocol}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0 {
		families = append(families, corev1.IPv6Protocol)
	}
	if !equalJSON(t, svc.Spec.IPFamilies, families) || svc.Spec.IPFamilyPolicy == nil {
		t.Fatalf("%s: ipFamilies %v, policy %v", svc.Name, svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy)
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, p := range svc.Spec.Ports {
			if !inRange(p.NodePort) {
				t.Fatalf("%s: port %d got node port %d", svc.Name, p.Port, p.NodePort)
			}
		}
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		!inRange(svc.Spec.HealthCheckNodePort) {
		t.Fatalf("%s: health check node port %d", svc.Name, svc.Spec.HealthCheckNodePort)
	}
}

// TestServices_EveryCreatePath: POST, server-side apply of a missing
// object and PUT of a missing object store the same Service (allocated
// values aside), each with its addresses allocated, for every kind of
// Service; a dual-stack requirement this single-stack cluster cannot
// meet is refused the same way on each path.
func TestServices_EveryCreatePath(t *testing.T) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(newServer(t))
	svcs := cs.CoreV1().Services("default")
	rc := cs.CoreV1().RESTClient()
	for kind := range serviceManifests {
		t.Run(kind, func(t *testing.T) {
			var posted corev1.Service
			if err := json.Unmarshal(serviceManifest(t, kind, kind+"-post"), &posted); err != nil {
				t.Fatal(err)
			}
			viaPost, err := svcs.Create(ctx, &posted, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			viaApply, err := svcs.Patch(ctx, kind+"-apply", types.ApplyPatchType, serviceManifest(t, kind, kind+"-apply"),
				metav1.PatchOptions{FieldManager: "test"})
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			viaPut := &corev1.Service{}
			var code int
			err = rc.Put().Namespace("default").Resource("services").Name(kind + "-put").
				Body(serviceManifest(t, kind, kind+"-put")).Do(ctx).StatusCode(&code).Into(viaPut)
			if err != nil || code != 201 {
				t.Fatalf("PUT of a missing service: %v (%d), want 201 Created", err, code)
			}
			for _, svc := range []*corev1.Service{viaPost, viaApply, viaPut} {
				stored, err := svcs.Get(ctx, svc.Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				checkAllocated(t, stored)
				if got, want := comparableService(stored), comparableService(viaPost); !equalJSON(t, got, want) {
					t.Fatalf("%s differs from the POSTed service:\n got %s\nwant %s", svc.Name, mustJSON(t, got), mustJSON(t, want))
				}
			}
			if viaApply.Spec.ClusterIP != corev1.ClusterIPNone && viaApply.Spec.ClusterIP != "" && viaApply.Spec.ClusterIP == viaPost.Spec.ClusterIP {
				t.Fatalf("two services share %s", viaPost.Spec.ClusterIP)
			}
		})
	}

	// RequireDualStack on a single-stack cluster: refused with
	// kube-apiserver's message, whichever way it comes.
	const dual = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"dual"},
		"spec":{"ipFamilyPolicy":"RequireDualStack","selector":{"app":"web"},"ports":[{"port":80}]}}`
	var svc corev1.Service
	if err := json.Unmarshal([]byte(dual), &svc); err != nil {
		t.Fatal(err)
	}
	_, postErr := svcs.Create(ctx, &svc, metav1.CreateOptions{})
	_, applyErr := svcs.Patch(ctx, "dual", types.ApplyPatchType, []byte(dual), metav1.PatchOptions{FieldManager: "test"})
	for name, err := range map[string]error{"POST": postErr, "apply": applyErr} {
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "this cluster is not configured for dual-stack services") {
			t.Fatalf("%s of a RequireDualStack service: %v, want 422 (not configured for dual-stack)", name, err)
		}
	}
}

// TestServices_DryRunKeepsNothing: a dry-run apply, create or update of a
// service answers with addresses but claims none: the same addresses can
// be had right after.
func TestServices_DryRunKeepsNothing(t *testing.T) {
	ctx := context.Background()
	svcs := kubernetes.NewForConfigOrDie(newServer(t)).CoreV1().Services("default")
	const manifest = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"dry"},
		"spec":{"type":"NodePort","clusterIP":"10.96.100.100","selector":{"app":"web"},"ports":[{"port":80,"nodePort":30080}]}}`
	dry, err := svcs.Patch(ctx, "dry", types.ApplyPatchType, []byte(manifest), metav1.PatchOptions{FieldManager: "test", DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("dry-run apply: %v", err)
	}
	if dry.Spec.ClusterIP != "10.96.100.100" || dry.Spec.Ports[0].NodePort != 30080 || dry.ResourceVersion != "" {
		t.Fatalf("dry-run apply answered %q %d rv %q", dry.Spec.ClusterIP, dry.Spec.Ports[0].NodePort, dry.ResourceVersion)
	}
	if _, err := svcs.Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after a dry run: %v, want NotFound", err)
	}
	var svc corev1.Service
	if err := json.Unmarshal([]byte(manifest), &svc); err != nil {
		t.Fatal(err)
	}
	svc.Name = "dry-create"
	if _, err := svcs.Create(ctx, svc.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	// The same addresses, for real.
	svc.Name = "real"
	real, err := svcs.Create(ctx, svc.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the addresses a dry run answered with are taken: %v", err)
	}
	// A dry-run change of type gives nothing back and claims nothing.
	toCluster := real.DeepCopy()
	toCluster.Spec.Type = corev1.ServiceTypeClusterIP
	toCluster.Spec.Ports[0].NodePort = 0
	if _, err := svcs.Update(ctx, toCluster, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run update: %v", err)
	}
	svc.Name = "taken"
	svc.Spec.ClusterIP = ""
	if _, err := svcs.Create(ctx, svc.DeepCopy(), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("node port 30080 after a dry-run update that dropped it: %v, want Invalid (still taken)", err)
	}
}

// TestServices_TypeChanges: an update that changes a service's type gets
// or gives back what the new type needs, as kube-apiserver.
func TestServices_TypeChanges(t *testing.T) {
	ctx := context.Background()
	svcs := kubernetes.NewForConfigOrDie(newServer(t)).CoreV1().Services("default")
	svc, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}
	if svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("ExternalName to NodePort: %v", err)
	}
	checkAllocated(t, svc)
	port, ip := svc.Spec.Ports[0].NodePort, svc.Spec.ClusterIP
	svc.Spec.Type, svc.Spec.Ports[0].NodePort = corev1.ServiceTypeClusterIP, 0
	if svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("NodePort to ClusterIP: %v", err)
	}
	if svc.Spec.Ports[0].NodePort != 0 || svc.Spec.ClusterIP != ip {
		t.Fatalf("after NodePort to ClusterIP: node port %d, cluster IP %s (was %s)", svc.Spec.Ports[0].NodePort, svc.Spec.ClusterIP, ip)
	}
	// The node port is free again.
	if _, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reuse"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: port}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node port %d after its service gave it up: %v", port, err)
	}
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"}
	if svc, err = svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("ClusterIP to ExternalName: %v", err)
	}
	if svc.Spec.ClusterIP != "" || len(svc.Spec.IPFamilies) != 0 {
		t.Fatalf("ExternalName kept %q %v", svc.Spec.ClusterIP, svc.Spec.IPFamilies)
	}
	if _, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reuse-ip"},
		Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("cluster IP %s after its service became ExternalName: %v", ip, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	return mustJSON(t, a) == mustJSON(t, b)
}
