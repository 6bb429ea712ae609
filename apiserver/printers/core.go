package printers

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Printers of the core/v1 kinds.

func corePrinters() []printerEntry {
	pod := printerOf(podColumns, podCells)
	pod.conditions = func(obj runtime.Object) []metav1.TableRowCondition { return podRowConditions(obj.(*corev1.Pod)) }
	return []printerEntry{
		{&corev1.Pod{}, pod},
		{&corev1.Namespace{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Status", "Lifecycle phase of the namespace."),
			ageColumn,
		}, func(o *corev1.Namespace) []any {
			return []any{o.Name, string(o.Status.Phase), translateAge(o.CreationTimestamp)}
		})},
		{&corev1.Node{}, printerOf(nodeColumns, nodeCells)},
		{&corev1.Service{}, printerOf(serviceColumns, serviceCells)},
		{&corev1.Endpoints{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Endpoints", "Addresses and ports behind the service (the first few)."),
			ageColumn,
		}, func(o *corev1.Endpoints) []any {
			return []any{o.Name, endpointsCell(o.Subsets), translateAge(o.CreationTimestamp)}
		})},
		{&corev1.ConfigMap{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			integerColumn("Data", "Number of keys in data and binaryData."),
			ageColumn,
		}, func(o *corev1.ConfigMap) []any {
			return []any{o.Name, int64(len(o.Data) + len(o.BinaryData)), translateAge(o.CreationTimestamp)}
		})},
		{&corev1.Secret{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			stringColumn("Type", "Kind of secret, which decides the keys it must hold."),
			integerColumn("Data", "Number of keys in data."),
			ageColumn,
		}, func(o *corev1.Secret) []any {
			typ := o.Type
			if typ == "" {
				typ = corev1.SecretTypeOpaque
			}
			return []any{o.Name, string(typ), int64(len(o.Data)), translateAge(o.CreationTimestamp)}
		})},
		{&corev1.ServiceAccount{}, printerOf([]metav1.TableColumnDefinition{nameColumn,
			integerColumn("Secrets", "Number of secrets listed for the service account."),
			ageColumn,
		}, func(o *corev1.ServiceAccount) []any {
			return []any{o.Name, int64(len(o.Secrets)), translateAge(o.CreationTimestamp)}
		})},
		{&corev1.Event{}, printerOf(eventColumns, eventCells)},
	}
}

// Pod

var podColumns = []metav1.TableColumnDefinition{nameColumn,
	stringColumn("Ready", "Ready containers of the pod's containers (sidecars included)."),
	stringColumn("Status", "The pod's phase, or the reason it is not (yet) running as it should."),
	stringColumn("Restarts", "Container restarts, and how long ago the last one was."),
	ageColumn,
	wide(stringColumn("IP", "The pod's (first) IP address.")),
	wide(stringColumn("Node", "The node the pod is bound to.")),
	wide(stringColumn("Nominated Node", "The node the scheduler means to place the pod on once victims are preempted.")),
	wide(stringColumn("Readiness Gates", "Readiness gates whose condition is true, of all.")),
}

// The reason the node lifecycle controller gives pods on a lost node.
const podReasonNodeLost = "NodeLost"

func podCells(pod *corev1.Pod) []any {
	sum := summarizePod(pod)
	restarts := strconv.Itoa(sum.restarts)
	if sum.restarts != 0 && !sum.lastRestart.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", sum.restarts, translateAge(sum.lastRestart))
	}
	ip := pod.Status.PodIP
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	}
	gates := cellNone
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		met := 0
		for _, g := range pod.Spec.ReadinessGates {
			if c := podCondition(pod, g.ConditionType); c != nil && c.Status == corev1.ConditionTrue {
				met++
			}
		}
		gates = fmt.Sprintf("%d/%d", met, n)
	}
	return []any{
		pod.Name, fmt.Sprintf("%d/%d", sum.ready, sum.total), sum.status, restarts, translateAge(pod.CreationTimestamp),
		orNone(ip), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), gates,
	}
}

// podSummary is what the READY, STATUS and RESTARTS cells say.
type podSummary struct {
	ready, total int
	status       string
	restarts     int
	lastRestart  metav1.Time
}

// restartTally counts container restarts and keeps the latest end of a
// previous run.
type restartTally struct {
	count int
	last  metav1.Time
}

func (t *restartTally) add(cs corev1.ContainerStatus) {
	t.count += int(cs.RestartCount)
	if term := cs.LastTerminationState.Terminated; term != nil && t.last.Before(&term.FinishedAt) {
		t.last = term.FinishedAt
	}
}

// summarizePod works out the pod's READY, STATUS and RESTARTS as kubectl
// shows them: init containers first (the pod is "Init:..." until they are
// done; sidecars, init containers that keep running, count as
// containers), then the app containers, the first of which not running
// well gives the status.
func summarizePod(pod *corev1.Pod) podSummary {
	sum := podSummary{total: len(pod.Spec.Containers), status: string(pod.Status.Phase)}
	if pod.Status.Reason != "" {
		sum.status = pod.Status.Reason
	}
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Reason == corev1.PodReasonSchedulingGated {
		sum.status = corev1.PodReasonSchedulingGated
	}

	sidecars := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			sum.total++
		}
	}

	var all, sidecarRestarts restartTally
	initializing := false
	for i, cs := range pod.Status.InitContainerStatuses {
		all.add(cs)
		if sidecars[cs.Name] {
			sidecarRestarts.add(cs)
		}
		if term := cs.State.Terminated; term != nil && term.ExitCode == 0 {
			continue // done
		}
		if sidecars[cs.Name] && cs.Started != nil && *cs.Started {
			if cs.Ready {
				sum.ready++
			}
			continue // a sidecar up and running
		}
		initializing = true
		sum.status = initContainerStatus(cs, i, len(pod.Spec.InitContainers))
		break
	}

	tally := all
	if !initializing || podConditionTrue(pod, corev1.PodInitialized) {
		// The app containers' restarts count, and the sidecars'.
		tally = sidecarRestarts
		running := false
		// The first container in spec order that has a reason wins.
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := pod.Status.ContainerStatuses[i]
			tally.add(cs)
			switch w, term := cs.State.Waiting, cs.State.Terminated; {
			case w != nil && w.Reason != "":
				sum.status = w.Reason
			case term != nil && term.Reason != "":
				sum.status = term.Reason
			case term != nil && term.Signal != 0:
				sum.status = fmt.Sprintf("Signal:%d", term.Signal)
			case term != nil:
				sum.status = fmt.Sprintf("ExitCode:%d", term.ExitCode)
			case cs.Ready && cs.State.Running != nil:
				running = true
				sum.ready++
			}
		}
		// A container that completed while others still run.
		if sum.status == "Completed" && running {
			sum.status = "NotReady"
			if podConditionTrue(pod, corev1.PodReady) {
				sum.status = string(corev1.PodRunning)
			}
		}
	}
	sum.restarts, sum.lastRestart = tally.count, tally.last

	if pod.DeletionTimestamp != nil {
		switch {
		case pod.Status.Reason == podReasonNodeLost:
			sum.status = "Unknown"
		case pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			sum.status = "Terminating"
		}
	}
	return sum
}

// initContainerStatus is the status of a pod whose i-th init container
// (of n) has not completed.
func initContainerStatus(cs corev1.ContainerStatus, i, n int) string {
	switch w, term := cs.State.Waiting, cs.State.Terminated; {
	case term != nil && term.Reason != "":
		return "Init:" + term.Reason
	case term != nil && term.Signal != 0:
		return fmt.Sprintf("Init:Signal:%d", term.Signal)
	case term != nil:
		return fmt.Sprintf("Init:ExitCode:%d", term.ExitCode)
	case w != nil && w.Reason != "" && w.Reason != "PodInitializing":
		return "Init:" + w.Reason
	}
	return fmt.Sprintf("Init:%d/%d", i, n)
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func podConditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	c := podCondition(pod, t)
	return c != nil && c.Status == corev1.ConditionTrue
}

// podRowConditions mark the rows of finished pods Completed.
func podRowConditions(pod *corev1.Pod) []metav1.TableRowCondition {
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(pod.Status.Phase), Message: "The pod has completed successfully."}}
	case corev1.PodFailed:
		return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(pod.Status.Phase), Message: "The pod failed."}}
	}
	return nil
}

// Node

var nodeColumns = []metav1.TableColumnDefinition{nameColumn,
	stringColumn("Status", "Whether the node is ready, and whether new pods may be scheduled to it."),
	stringColumn("Roles", "Roles from the node's node-role.kubernetes.io/ labels."),
	ageColumn,
	stringColumn("Version", "Version of the node's kubelet."),
	wide(stringColumn("Internal-IP", "The node's first internal IP address.")),
	wide(stringColumn("External-IP", "The node's first external IP address.")),
	wide(stringColumn("OS-Image", "Operating system the node reports.")),
	wide(stringColumn("Kernel-Version", "Kernel version the node reports.")),
	wide(stringColumn("Container-Runtime", "Container runtime and version the node reports.")),
}

const (
	nodeRoleLabelPrefix = "node-role.kubernetes.io/"
	nodeRoleLabel       = "kubernetes.io/role" // the older, single-valued form
)

func nodeCells(n *corev1.Node) []any {
	status := []string{"Unknown"}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status[0] = string(corev1.NodeReady)
			if c.Status != corev1.ConditionTrue {
				status[0] = "Not" + string(corev1.NodeReady)
			}
		}
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}
	var roles []string
	for k, v := range n.Labels {
		if role, ok := strings.CutPrefix(k, nodeRoleLabelPrefix); ok && role != "" {
			roles = append(roles, role)
		} else if k == nodeRoleLabel && v != "" {
			roles = append(roles, v)
		}
	}
	slices.Sort(roles)
	roles = slices.Compact(roles)
	info := n.Status.NodeInfo
	orUnknown := func(s string) string {
		if s == "" {
			return cellUnknown
		}
		return s
	}
	return []any{
		n.Name, strings.Join(status, ","), orNone(strings.Join(roles, ",")), translateAge(n.CreationTimestamp), info.KubeletVersion,
		nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
	}
}

func nodeAddress(n *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return cellNone
}

// Service

var serviceColumns = []metav1.TableColumnDefinition{nameColumn,
	stringColumn("Type", "How the service is exposed: ClusterIP, NodePort, LoadBalancer or ExternalName."),
	stringColumn("Cluster-IP", "The service's (first) virtual IP inside the cluster."),
	stringColumn("External-IP", "Addresses the service is reachable at from outside the cluster."),
	stringColumn("Port(s)", "The service's ports, with node ports, and protocols."),
	ageColumn,
	wide(stringColumn("Selector", "Labels of the pods the service routes to.")),
}

func serviceCells(s *corev1.Service) []any {
	typ := s.Spec.Type
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP // the API's default
	}
	clusterIP := s.Spec.ClusterIP
	if len(s.Spec.ClusterIPs) > 0 {
		clusterIP = s.Spec.ClusterIPs[0]
	}
	ports := make([]string, len(s.Spec.Ports))
	for i, p := range s.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if p.NodePort > 0 {
			ports[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, proto)
		} else {
			ports[i] = fmt.Sprintf("%d/%s", p.Port, proto)
		}
	}
	return []any{
		s.Name, string(typ), orNone(clusterIP), serviceExternalIP(s, typ), orNone(strings.Join(ports, ",")),
		translateAge(s.CreationTimestamp), labels.FormatLabels(s.Spec.Selector),
	}
}

func serviceExternalIP(s *corev1.Service, typ corev1.ServiceType) string {
	switch typ {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return orNone(strings.Join(s.Spec.ExternalIPs, ","))
	case corev1.ServiceTypeLoadBalancer:
		// Load balancer addresses, sorted and without repeats, then the
		// external IPs.
		var lb []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				lb = append(lb, in.IP)
			} else if in.Hostname != "" {
				lb = append(lb, in.Hostname)
			}
		}
		slices.Sort(lb)
		all := append(slices.Compact(lb), s.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return cellUnknown
}

// Endpoints

// endpointsCell lists the first three address:port pairs (addresses alone
// for subsets without ports) and how many more there are.
func endpointsCell(subsets []corev1.EndpointSubset) string {
	if len(subsets) == 0 {
		return cellNone
	}
	const shown = 3
	var list []string
	total := 0
	add := func(s string) {
		total++
		if len(list) < shown {
			list = append(list, s)
		}
	}
	for _, ss := range subsets {
		if len(ss.Ports) == 0 {
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	return moreCell(list, total, "")
}

// moreCell joins the items shown and says how many of total were left
// out; empty is what to show for nothing.
func moreCell(shown []string, total int, empty string) string {
	s := strings.Join(shown, ",")
	if total > len(shown) {
		return fmt.Sprintf("%s + %d more...", s, total-len(shown))
	}
	if s == "" {
		return empty
	}
	return s
}

// Event

var eventColumns = []metav1.TableColumnDefinition{
	stringColumn("Last Seen", "Time since the event was last observed."),
	stringColumn("Type", "Normal or Warning."),
	stringColumn("Reason", "Short, machine-readable cause of the event."),
	stringColumn("Object", "The object the event is about, as kind/name."),
	wide(stringColumn("Subobject", "The part of the object the event is about, such as a container.")),
	wide(stringColumn("Source", "The component (and host) that reported the event.")),
	stringColumn("Message", "What happened, for humans."),
	wide(stringColumn("First Seen", "Time since the event was first observed.")),
	wide(integerColumn("Count", "How many times the event has occurred.")),
	wide(metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: nameColumn.Description}),
}

func eventCells(e *corev1.Event) []any {
	first := translateAge(e.FirstTimestamp)
	if e.FirstTimestamp.IsZero() {
		first = translateMicroAge(e.EventTime)
	}
	last := first
	if !e.LastTimestamp.IsZero() {
		last = translateAge(e.LastTimestamp)
	}
	count := e.Count
	if e.Series != nil {
		last, count = translateMicroAge(e.Series.LastObservedTime), e.Series.Count
	} else if count == 0 {
		count = 1 // events.k8s.io events that happened once carry no count
	}
	object := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		object += "/" + e.InvolvedObject.Name
	}
	component, host := e.Source.Component, e.Source.Host
	if component == "" {
		component = e.ReportingController
	}
	if host == "" {
		host = e.ReportingInstance
	}
	source := component
	if host != "" {
		source += ", " + host
	}
	return []any{
		last, e.Type, e.Reason, object, e.InvolvedObject.FieldPath, source,
		strings.TrimSpace(e.Message), first, int64(count), e.Name,
	}
}
