package printers

import (
	"strconv"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationhelper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
)

// Printers of the apiregistration, coordination, discovery, policy,
// scheduling and RBAC kinds.

func groupPrinters() []printerEntry {
	roleColumns := []metav1.TableColumnDefinition{nameColumn,
		{Name: "Created At", Type: "date", Description: "When the object was created (UTC)."},
	}
	bindingColumns := []metav1.TableColumnDefinition{nameColumn,
		stringColumn("Role", "The role granted, as kind/name."),
		ageColumn,
		wide(stringColumn("Users", "Users the role is granted to.")),
		wide(stringColumn("Groups", "Groups the role is granted to.")),
		wide(stringColumn("ServiceAccounts", "Service accounts the role is granted to, as namespace/name.")),
	}
	return []printerEntry{
		// As kube-aggregator prints them.
		{&apiregistrationv1.APIService{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Service", "The reference to the service that hosts this API endpoint."),
			stringColumn("Available", "Whether this service is available."),
			ageColumn,
		}, func(o *apiregistrationv1.APIService) []any {
			service := "Local"
			if o.Spec.Service != nil {
				service = o.Spec.Service.Namespace + "/" + o.Spec.Service.Name
			}
			available := "Unknown"
			if c := apiregistrationhelper.GetAPIServiceConditionByType(o, apiregistrationv1.Available); c != nil {
				available = string(c.Status)
				if c.Status != apiregistrationv1.ConditionTrue {
					available += " (" + c.Reason + ")"
				}
			}
			return []any{o.Name, service, available, translateAge(o.CreationTimestamp)}
		})},
		{&coordinationv1.Lease{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Holder", "Identity of the lease's current holder."),
			ageColumn,
		}, func(o *coordinationv1.Lease) []any {
			holder := ""
			if o.Spec.HolderIdentity != nil {
				holder = *o.Spec.HolderIdentity
			}
			return []any{o.Name, holder, translateAge(o.CreationTimestamp)}
		})},
		{&discoveryv1.EndpointSlice{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("AddressType", "Kind of the addresses in the slice: IPv4, IPv6 or FQDN."),
			stringColumn("Ports", "The slice's ports (the first few)."),
			stringColumn("Endpoints", "The slice's endpoint addresses (the first few)."),
			ageColumn,
		}, func(o *discoveryv1.EndpointSlice) []any {
			return []any{o.Name, string(o.AddressType), slicePortsCell(o.Ports), sliceEndpointsCell(o.Endpoints), translateAge(o.CreationTimestamp)}
		})},
		{&policyv1.PodDisruptionBudget{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Min Available", "Pods (number or percentage) that must stay available."),
			stringColumn("Max Unavailable", "Pods (number or percentage) that may be unavailable."),
			integerColumn("Allowed Disruptions", "Pods that may be evicted now."),
			ageColumn,
		}, func(o *policyv1.PodDisruptionBudget) []any {
			minAvailable, maxUnavailable := "N/A", "N/A"
			if o.Spec.MinAvailable != nil {
				minAvailable = o.Spec.MinAvailable.String()
			}
			if o.Spec.MaxUnavailable != nil {
				maxUnavailable = o.Spec.MaxUnavailable.String()
			}
			return []any{o.Name, minAvailable, maxUnavailable, int64(o.Status.DisruptionsAllowed), translateAge(o.CreationTimestamp)}
		})},
		{&schedulingv1.PriorityClass{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			integerColumn("Value", "Priority of the pods of the class; higher goes first."),
			{Name: "Global-Default", Type: "boolean", Description: "Whether pods without a class get this one."},
			ageColumn,
			stringColumn("PreemptionPolicy", "Whether the class's pods may preempt lower-priority pods."),
		}, func(o *schedulingv1.PriorityClass) []any {
			policy := corev1.PreemptLowerPriority // the API's default
			if o.PreemptionPolicy != nil {
				policy = *o.PreemptionPolicy
			}
			return []any{o.Name, int64(o.Value), o.GlobalDefault, translateAge(o.CreationTimestamp), string(policy)}
		})},
		{&rbacv1.Role{}, printerOf(roleColumns, func(o *rbacv1.Role) []any {
			return []any{o.Name, createdAtCell(o.CreationTimestamp)}
		})},
		{&rbacv1.ClusterRole{}, printerOf(roleColumns, func(o *rbacv1.ClusterRole) []any {
			return []any{o.Name, createdAtCell(o.CreationTimestamp)}
		})},
		{&certificatesv1.CertificateSigningRequest{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			ageColumn,
			stringColumn("SignerName", "Who is asked to sign the certificate."),
			stringColumn("Requestor", "The user who asked for it."),
			stringColumn("RequestedDuration", "How long the certificate is asked to last."),
			stringColumn("Condition", "Approved, Denied, Issued, Failed or Pending."),
		}, func(o *certificatesv1.CertificateSigningRequest) []any {
			duration := "<none>"
			if o.Spec.ExpirationSeconds != nil {
				duration = (time.Duration(*o.Spec.ExpirationSeconds) * time.Second).String()
			}
			return []any{o.Name, translateAge(o.CreationTimestamp), o.Spec.SignerName, o.Spec.Username, duration, csrCondition(o)}
		})},
		// kubectl get crd: NAME, CREATED AT.
		{&apiextensionsv1.CustomResourceDefinition{}, printerOf(roleColumns, func(o *apiextensionsv1.CustomResourceDefinition) []any {
			return []any{o.Name, createdAtCell(o.CreationTimestamp)}
		})},
		{&rbacv1.RoleBinding{}, printerOf(bindingColumns, func(o *rbacv1.RoleBinding) []any {
			return bindingCells(o.Name, o.CreationTimestamp, o.RoleRef, o.Subjects)
		})},
		{&rbacv1.ClusterRoleBinding{}, printerOf(bindingColumns, func(o *rbacv1.ClusterRoleBinding) []any {
			return bindingCells(o.Name, o.CreationTimestamp, o.RoleRef, o.Subjects)
		})},
	}
}

// createdAtCell is the CREATED AT of roles: an RFC 3339 time in UTC.
func createdAtCell(t metav1.Time) string {
	if t.IsZero() {
		return cellUnknown
	}
	return t.UTC().Format(time.RFC3339)
}

func bindingCells(name string, created metav1.Time, ref rbacv1.RoleRef, subjects []rbacv1.Subject) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		}
	}
	return []any{
		name, ref.Kind + "/" + ref.Name, translateAge(created),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", "),
	}
}

const sliceItemsShown = 3

// slicePortsCell lists the first ports of an EndpointSlice ("*" for a port
// without number or name, which means all ports).
func slicePortsCell(ports []discoveryv1.EndpointPort) string {
	var shown []string
	for _, p := range ports[:min(len(ports), sliceItemsShown)] {
		switch {
		case p.Port != nil:
			shown = append(shown, strconv.Itoa(int(*p.Port)))
		case p.Name != nil:
			shown = append(shown, *p.Name)
		default:
			shown = append(shown, "*")
		}
	}
	return moreCell(shown, len(ports), "<unset>")
}

// sliceEndpointsCell lists the first addresses of an EndpointSlice.
func sliceEndpointsCell(endpoints []discoveryv1.Endpoint) string {
	var shown []string
	total := 0
	for _, e := range endpoints {
		for _, a := range e.Addresses {
			total++
			if len(shown) < sliceItemsShown {
				shown = append(shown, a)
			}
		}
	}
	return moreCell(shown, total, "<unset>")
}

// csrCondition is kubectl's summary of a CSR's conditions
// (Approved,Issued; Denied; Pending...).
func csrCondition(o *certificatesv1.CertificateSigningRequest) string {
	var parts []string
	for _, c := range o.Status.Conditions {
		if c.Status == corev1.ConditionFalse {
			continue
		}
		parts = append(parts, string(c.Type))
	}
	if len(o.Status.Certificate) > 0 {
		parts = append(parts, "Issued")
	}
	if len(parts) == 0 {
		return "Pending"
	}
	return strings.Join(parts, ",")
}
