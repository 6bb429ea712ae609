package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubetypes "k8s.io/kubelet/pkg/types"
)

// StartupPhases splits pod startup at the times the runtime recorded:
// Kubelet is create to sandbox creation (API, scheduler, kubelet watch,
// volumes), Sandbox is sandbox to container creation (pause container,
// CNI), Start is container creation to start, and Report is start to
// Running as the watcher saw it (the kubelet noticing the start, then its
// status write). Each is sorted.
type StartupPhases struct {
	Kubelet, Sandbox, Start, Report []time.Duration
}

// startupPhases asks the runtime at socket (CRI) when each pod's sandbox
// and container were created and started; created and running are the
// benchmark's own times by pod name.
func startupPhases(ctx context.Context, socket string, created, running map[string]time.Time) (StartupPhases, error) {
	var ph StartupPhases
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return ph, err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ns := map[string]string{kubetypes.KubernetesPodNamespaceLabel: "default"}
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: ns}})
	if err != nil {
		return ph, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	sandboxAt := map[string]time.Time{} // by pod name
	for _, sb := range sbs.Items {
		sandboxAt[sb.Metadata.Name] = time.Unix(0, sb.CreatedAt)
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: ns}})
	if err != nil {
		return ph, fmt.Errorf("CRI ListContainers: %w", err)
	}
	for _, c := range cs.Containers {
		pod := c.Labels[kubetypes.KubernetesPodNameLabel]
		sb, ok1 := sandboxAt[pod]
		c0, ok2 := created[pod]
		r, ok3 := running[pod]
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.Id})
		if err != nil {
			return ph, fmt.Errorf("CRI ContainerStatus: %w", err)
		}
		if st.Status.StartedAt == 0 {
			continue
		}
		made, started := time.Unix(0, c.CreatedAt), time.Unix(0, st.Status.StartedAt)
		ph.Kubelet = append(ph.Kubelet, sb.Sub(c0))
		ph.Sandbox = append(ph.Sandbox, made.Sub(sb))
		ph.Start = append(ph.Start, started.Sub(made))
		ph.Report = append(ph.Report, r.Sub(started))
	}
	for _, d := range [][]time.Duration{ph.Kubelet, ph.Sandbox, ph.Start, ph.Report} {
		slices.Sort(d)
	}
	return ph, nil
}
