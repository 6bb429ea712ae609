// Package kubeletserving approves kubelets' serving-certificate requests
// (signer kubernetes.io/kubelet-serving), which kube-controller-manager
// leaves to the cluster's operator: a CSR is approved when a node asks for
// itself (requestor system:node:NAME, subject CN system:node:NAME in
// system:nodes), only for serving usages, and only for names and addresses
// its Node object lists. Anything else is left for a human.
package kubeletserving

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Reason is the approval condition's reason.
const Reason = "AutoApproved"

// Run approves matching CSRs until ctx ends.
func Run(ctx context.Context, cs kubernetes.Interface) error {
	f := informers.NewSharedInformerFactory(cs, 0)
	csrs := f.Certificates().V1().CertificateSigningRequests()
	nodes := f.Core().V1().Nodes()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && csr.Spec.SignerName == certificatesv1.KubeletServingSignerName {
			queue.Add(csr.Name)
		}
	}
	if _, err := csrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }}); err != nil {
		return err
	}
	// A node that registers after its CSR: look again.
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		for _, c := range csrs.Informer().GetStore().List() {
			enqueue(c)
		}
	}}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), csrs.Informer().HasSynced, nodes.Informer().HasSynced) {
		return ctx.Err()
	}
	go func() { <-ctx.Done(); queue.ShutDown() }()
	for {
		name, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		err := func() error {
			defer queue.Done(name)
			csr, err := csrs.Lister().Get(name)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			if decided(csr) {
				return nil
			}
			node, why := Check(csr, func(n string) (*corev1.Node, error) { return nodes.Lister().Get(n) })
			if why != "" {
				klog.FromContext(ctx).V(2).Info("not approving a kubelet serving CSR", "csr", name, "reason", why)
				return nil
			}
			csr = csr.DeepCopy()
			csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: Reason,
				Message: "the serving certificate of node " + node + ", for the names and addresses its Node lists", LastUpdateTime: metav1.Now(),
			})
			_, err = cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
			return err
		}()
		if err != nil && ctx.Err() == nil {
			queue.AddRateLimited(name)
		} else {
			queue.Forget(name)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// Check says whether csr may be approved: the node's name, or why not.
func Check(csr *certificatesv1.CertificateSigningRequest, getNode func(string) (*corev1.Node, error)) (string, string) {
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		return "", "another signer"
	}
	node, ok := strings.CutPrefix(csr.Spec.Username, "system:node:")
	if !ok || node == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return "", "not requested by a node"
	}
	for _, u := range csr.Spec.Usages {
		switch u {
		case certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth:
		default:
			return "", fmt.Sprintf("usage %q", u)
		}
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
		return "", "no server auth usage"
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		return "", "no PEM request"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "", "request: " + err.Error()
	}
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return "", fmt.Sprintf("subject %q %v is not the requesting node", req.Subject.CommonName, req.Subject.Organization)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return "", "emails or URIs requested"
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 {
		return "", "no names or addresses"
	}
	n, err := getNode(node)
	if err != nil {
		return "", "node " + node + ": " + err.Error()
	}
	known := map[string]bool{}
	for _, a := range n.Status.Addresses {
		known[a.Address] = true
	}
	for _, d := range req.DNSNames {
		if !known[d] {
			return "", fmt.Sprintf("name %q is not among node %s's addresses", d, node)
		}
	}
	for _, ip := range req.IPAddresses {
		if !known[ip.String()] {
			return "", fmt.Sprintf("address %s is not among node %s's addresses", ip, node)
		}
	}
	return node, ""
}
