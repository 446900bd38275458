// Command xpupool-hami-check reads a cluster's Nodes and Pods (a JSON snapshot) and judges them by
// HAMi's own code, so that "HAMi reads what xpupool writes" is checked against HAMi itself rather
// than against xpupool's idea of HAMi (issue 56). It is xpupool's program, but it only compiles
// inside HAMi's module: tools/k8s/build.sh --hami-check copies this file into cmd/xpupool-check of
// the HAMi tree it archived at the pinned commit and builds it there, so every import below is
// HAMi v2.10.0's code, never a copy of it.
//
// Input (-in FILE, "-" for stdin): {"nodes": [Node...], "pods": [Pod...], "admissions": {"ns/name":
// {"lock": "<the node's hami.io/mutex.lock when the device plugin served the pod>", "at": <unix
// seconds>}}}; admissions is optional (what a device-plugin stand-in saw; without it a pod is
// admitted at its bind time with no lock on the node).
//
// Output (stdout, one JSON object):
//   - decode: every pod's device annotations through device.DecodePodDevices (allocated and
//     to-allocate), errors counted, and the decoded shape against the pod's spec (one entry per
//     container, init containers first; as many cards as the container's nvidia.com/gpu);
//   - nodes: every node's registration through nvidia's GetNodeDevices;
//   - cards: every card charged as HAMi's scheduler charges it (device.CollapseInitContainerUsage,
//     device.AppContainersOnlyDeviceUsage once util.AllInitContainersSucceeded), against its
//     registered memory, cores and task count;
//   - admissions: the kubelet's Allocate calls replayed per node in admission order against a
//     fake API holding the node and the pods as they were then, with the device plugin's own
//     functions: util.GetPendingPod (whose pod is served), plugin.GetNextDeviceRequest (which
//     container, how many cards), plugin.PodAllocationTrySuccess (bind-phase success and the
//     node lock's release).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/Project-HAMi/HAMi/pkg/device"
	"github.com/Project-HAMi/HAMi/pkg/device-plugin/nvidiadevice/nvinternal/plugin"
	"github.com/Project-HAMi/HAMi/pkg/device/nvidia"
	"github.com/Project-HAMi/HAMi/pkg/util"
	"github.com/Project-HAMi/HAMi/pkg/util/client"
	"github.com/Project-HAMi/HAMi/pkg/util/nodelock"
)

const countName = "nvidia.com/gpu"

type admission struct {
	Lock string  `json:"lock"`
	At   float64 `json:"at"`
}

type input struct {
	Nodes      []corev1.Node        `json:"nodes"`
	Pods       []corev1.Pod         `json:"pods"`
	Admissions map[string]admission `json:"admissions"`
}

type cardDev struct {
	UUID  string `json:"uuid"`
	Type  string `json:"type"`
	Mem   int32  `json:"mem"`
	Cores int32  `json:"cores"`
}

type podOut struct {
	Pod         string      `json:"pod"`
	Node        string      `json:"node"`
	Phase       string      `json:"phase"`
	Error       string      `json:"error,omitempty"`
	Shape       string      `json:"shape_mismatch,omitempty"`
	Containers  [][]cardDev `json:"containers"`
	InitCount   int         `json:"init_containers"`
	ChargedApps bool        `json:"charged_app_only"`
}

type cardOut struct {
	Node    string   `json:"node"`
	UUID    string   `json:"uuid"`
	Type    string   `json:"type"`
	Mem     int32    `json:"used_mem"`
	Devmem  int32    `json:"devmem"`
	Cores   int32    `json:"used_cores"`
	Devcore int32    `json:"devcore"`
	Tasks   int32    `json:"tasks"`
	Count   int32    `json:"count"`
	Pods    []string `json:"pods"`
	Over    []string `json:"over,omitempty"`
}

type admitOut struct {
	Pod     string `json:"pod"`
	Node    string `json:"node"`
	Lock    string `json:"lock"`
	Served  string `json:"served"`
	Calls   int    `json:"allocate_calls"`
	Error   string `json:"error,omitempty"`
	Phase   string `json:"bind_phase_after"`
	LockOut string `json:"lock_after"`
}

type summary struct {
	Pods              int `json:"pods"`
	PodsWithDevices   int `json:"pods_with_devices"`
	DecodeErrors      int `json:"decode_errors"`
	ShapeMismatches   int `json:"shape_mismatches"`
	Nodes             int `json:"nodes"`
	NodeDecodeErrors  int `json:"node_decode_errors"`
	Cards             int `json:"cards"`
	CardsUsed         int `json:"cards_used"`
	OverCapacity      int `json:"over_capacity_cards"`
	UnknownCards      int `json:"unknown_cards"`
	Admissions        int `json:"admissions"`
	ServedOwnPod      int `json:"served_own_pod"`
	AdmissionFailures int `json:"admission_failures"`
	LocksLeft         int `json:"locks_left"`
}

type output struct {
	Summary    summary    `json:"summary"`
	Pods       []podOut   `json:"pods"`
	Cards      []cardOut  `json:"cards"`
	Admissions []admitOut `json:"admissions"`
	Unknown    []string   `json:"unknown_cards"`
	NodeErrors []string   `json:"node_errors"`
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

func terminated(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// asked is the kubelet's view of one container: how many cards it asks (its Allocate call).
func asked(c corev1.Container) int64 {
	q, ok := c.Resources.Limits[corev1.ResourceName(countName)]
	if !ok {
		return 0
	}
	return q.Value()
}

// shape compares a decoded annotation with the pod's containers: HAMi maps entry i to init
// container i, then to app container i-len(init); an entry for a container that does not exist,
// or a card count other than the container's nvidia.com/gpu, would make the device plugin serve
// the wrong container or fail ("device number not matched").
func shape(p *corev1.Pod, single device.PodSingleDevice) string {
	ctrs := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
	var bad []string
	for i, devs := range single {
		if i >= len(ctrs) {
			if len(devs) > 0 {
				bad = append(bad, fmt.Sprintf("entry %d has %d cards and no container", i, len(devs)))
			}
			continue
		}
		if want := asked(ctrs[i]); want > 0 && int64(len(devs)) != want {
			bad = append(bad, fmt.Sprintf("%s: %d cards, asks %d", ctrs[i].Name, len(devs), want))
		}
	}
	for i := len(single); i < len(ctrs); i++ {
		if asked(ctrs[i]) > 0 {
			bad = append(bad, fmt.Sprintf("%s: no entry", ctrs[i].Name))
		}
	}
	return strings.Join(bad, "; ")
}

func main() {
	in := flag.String("in", "-", "JSON snapshot {nodes, pods, admissions}; - for stdin")
	flag.Parse()
	quietKlog()

	var raw []byte
	var err error
	if *in == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(*in)
	}
	if err != nil {
		fatal(err)
	}
	var snap input
	if err := json.Unmarshal(raw, &snap); err != nil {
		fatal(fmt.Errorf("snapshot: %w", err))
	}

	// What HAMi's scheduler and device plugin set up from the chart's nvidia config: the
	// annotation keys of the NVIDIA type and the device types a pod may still wait for.
	nv := nvidia.InitNvidiaDevice(nvidia.NvidiaConfig{
		ResourceCountName:            countName,
		ResourceMemoryName:           "nvidia.com/gpumem",
		ResourceCoreName:             "nvidia.com/gpucores",
		ResourceMemoryPercentageName: "nvidia.com/gpumem-percentage",
		DefaultGPUNum:                1,
		MemoryFactor:                 1,
	})
	device.DevicesToHandle = []string{nvidia.NvidiaGPUDevice}

	out := output{Pods: []podOut{}, Cards: []cardOut{}, Admissions: []admitOut{}, Unknown: []string{}, NodeErrors: []string{}}
	out.Summary.Pods = len(snap.Pods)
	out.Summary.Nodes = len(snap.Nodes)

	// Cards as HAMi's scheduler registers them.
	type cardKey struct{ node, uuid string }
	cards := map[cardKey]*cardOut{}
	for _, n := range snap.Nodes {
		devs, err := nv.GetNodeDevices(n)
		if err != nil {
			if _, has := n.Annotations[nvidia.RegisterAnnos]; has {
				out.Summary.NodeDecodeErrors++
				out.NodeErrors = append(out.NodeErrors, fmt.Sprintf("%s: %v", n.Name, err))
			}
			continue
		}
		for _, d := range devs {
			cards[cardKey{n.Name, d.ID}] = &cardOut{Node: n.Name, UUID: d.ID, Type: d.Type,
				Devmem: d.Devmem, Devcore: d.Devcore, Count: d.Count, Pods: []string{}}
		}
	}
	out.Summary.Cards = len(cards)

	// Decode and charge every pod as pkg/scheduler/scheduler.go onAddPod/onUpdatePod do.
	for i := range snap.Pods {
		p := &snap.Pods[i]
		if _, has := p.Annotations[device.SupportDevices[nvidia.NvidiaGPUDevice]]; !has {
			continue
		}
		out.Summary.PodsWithDevices++
		node := p.Annotations[util.AssignedNodeAnnotations]
		po := podOut{Pod: key(p), Node: node, Phase: string(p.Status.Phase), InitCount: len(p.Spec.InitContainers), Containers: [][]cardDev{}}
		rawDevs, err := device.DecodePodDevices(device.SupportDevices, p.Annotations)
		if err == nil {
			_, err = device.DecodePodDevices(device.InRequestDevices, p.Annotations)
		}
		if err != nil {
			po.Error = err.Error()
			out.Summary.DecodeErrors++
			out.Pods = append(out.Pods, po)
			continue
		}
		single := rawDevs[nvidia.NvidiaGPUDevice]
		for _, ctr := range single {
			cd := []cardDev{}
			for _, d := range ctr {
				cd = append(cd, cardDev{d.UUID, d.Type, d.Usedmem, d.Usedcores})
			}
			po.Containers = append(po.Containers, cd)
		}
		if po.Shape = shape(p, single); po.Shape != "" {
			out.Summary.ShapeMismatches++
		}
		if node != "" && !terminated(p) {
			eff := device.CollapseInitContainerUsage(p, rawDevs)
			if util.AllInitContainersSucceeded(p) {
				eff = device.AppContainersOnlyDeviceUsage(p, rawDevs)
				po.ChargedApps = true
			}
			for _, ctr := range eff[nvidia.NvidiaGPUDevice] {
				for _, d := range ctr {
					c, ok := cards[cardKey{node, d.UUID}]
					if !ok {
						out.Summary.UnknownCards++
						out.Unknown = append(out.Unknown, fmt.Sprintf("%s: %s on %s", key(p), d.UUID, node))
						continue
					}
					c.Mem += d.Usedmem
					c.Cores += d.Usedcores
					c.Tasks += max(d.Slots, 1)
					c.Pods = append(c.Pods, key(p))
				}
			}
		}
		out.Pods = append(out.Pods, po)
	}
	keys := make([]cardKey, 0, len(cards))
	for k := range cards {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].node != keys[j].node {
			return keys[i].node < keys[j].node
		}
		return keys[i].uuid < keys[j].uuid
	})
	for _, k := range keys {
		c := cards[k]
		if c.Mem > c.Devmem {
			c.Over = append(c.Over, "memory")
		}
		if c.Cores > c.Devcore {
			c.Over = append(c.Over, "cores")
		}
		if c.Tasks > c.Count {
			c.Over = append(c.Over, "tasks")
		}
		if len(c.Over) > 0 {
			out.Summary.OverCapacity++
		}
		if len(c.Pods) > 0 {
			out.Summary.CardsUsed++
			out.Cards = append(out.Cards, *c)
		}
	}

	replayAdmissions(&snap, &out)
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fatal(err)
	}
}

// bindTime is HAMi's hami.io/bind-time (Unix seconds), +Inf when absent.
func bindTime(p *corev1.Pod) float64 {
	v, err := strconv.ParseFloat(p.Annotations[util.BindTimeAnnotations], 64)
	if err != nil {
		return math.Inf(1)
	}
	return v
}

// replayAdmissions plays the kubelet and HAMi's device plugin on each node, pod by pod in the
// order the pods were admitted. When pod P is admitted, the fake API holds the node (with the lock
// it carried then) and every pod of the node bound by then: those admitted before P Running with
// bind-phase success, the others Pending with bind-phase allocating and their to-allocate
// annotation as the scheduler wrote it (the allocated one: both are written at bind). One Allocate
// call per container asking cards, init containers first, as the kubelet makes them.
func replayAdmissions(snap *input, out *output) {
	byNode := map[string][]*corev1.Pod{}
	for i := range snap.Pods {
		p := &snap.Pods[i]
		node := p.Spec.NodeName
		if node == "" || p.Annotations[util.AssignedNodeAnnotations] == "" {
			continue
		}
		if _, has := p.Annotations[device.SupportDevices[nvidia.NvidiaGPUDevice]]; !has {
			continue
		}
		byNode[node] = append(byNode[node], p)
	}
	nodes := map[string]corev1.Node{}
	for _, n := range snap.Nodes {
		nodes[n.Name] = n
	}
	names := make([]string, 0, len(byNode))
	for n := range byNode {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		pods := byNode[name]
		at := func(p *corev1.Pod) float64 {
			if a, ok := snap.Admissions[key(p)]; ok && a.At > 0 {
				return a.At
			}
			return bindTime(p)
		}
		sort.SliceStable(pods, func(i, j int) bool {
			if at(pods[i]) != at(pods[j]) {
				return at(pods[i]) < at(pods[j])
			}
			return key(pods[i]) < key(pods[j])
		})
		replayNode(nodes[name], pods, at, snap.Admissions, out)
	}
}

func replayNode(node corev1.Node, pods []*corev1.Pod, at func(*corev1.Pod) float64, seen map[string]admission, out *output) {
	ctx := context.Background()
	node = *node.DeepCopy()
	node.ResourceVersion = ""
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	delete(node.Annotations, nodelock.NodeLockKey)
	cs := fake.NewSimpleClientset(&node)
	// The apiserver answers a field-selected list in key order (namespace, then name), which is
	// the order of HAMi's lockless fallback; the fake tracker neither selects nor orders.
	cs.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		objs, err := cs.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"),
			corev1.SchemeGroupVersion.WithKind("Pod"), "")
		if err != nil {
			return true, nil, err
		}
		list := objs.(*corev1.PodList)
		sel := action.(k8stesting.ListAction).GetListRestrictions().Fields
		items := []corev1.Pod{}
		for _, p := range list.Items {
			if sel == nil || sel.Empty() || sel.Matches(fieldSet(&p)) {
				items = append(items, p)
			}
		}
		sort.Slice(items, func(i, j int) bool { return key(&items[i]) < key(&items[j]) })
		return true, &corev1.PodList{Items: items}, nil
	})
	client.KubeClient = cs
	allocKey := device.SupportDevices[nvidia.NvidiaGPUDevice]
	reqKey := device.InRequestDevices[nvidia.NvidiaGPUDevice]
	added := map[string]bool{}
	for i, p := range pods {
		// Every pod bound by the time P is admitted is on the node, Pending and allocating.
		for _, q := range pods[i:] {
			if added[key(q)] || bindTime(q) > at(p) && q != p {
				continue
			}
			c := q.DeepCopy()
			c.ResourceVersion = ""
			c.Status = corev1.PodStatus{Phase: corev1.PodPending}
			c.Annotations[util.DeviceBindPhase] = util.DeviceBindAllocating
			c.Annotations[reqKey] = c.Annotations[allocKey]
			if _, err := cs.CoreV1().Pods(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
				fatal(err)
			}
			added[key(q)] = true
		}
		lock := seen[key(p)].Lock
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			fatal(err)
		}
		if lock == "" {
			delete(n.Annotations, nodelock.NodeLockKey)
		} else {
			n.Annotations[nodelock.NodeLockKey] = lock
		}
		if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			fatal(err)
		}
		res := admitOut{Pod: key(p), Node: node.Name, Lock: lock}
		res.Error = admit(ctx, node.Name, p, &res)
		got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			fatal(err)
		}
		res.Phase = got.Annotations[util.DeviceBindPhase]
		if res.Error == "" && res.Phase != util.DeviceBindSuccess {
			res.Error = "bind-phase " + res.Phase + " after every container was served"
		}
		n, err = cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			fatal(err)
		}
		res.LockOut = n.Annotations[nodelock.NodeLockKey]
		if res.LockOut != "" {
			out.Summary.LocksLeft++
		}
		out.Summary.Admissions++
		if res.Served == key(p) && res.Error == "" {
			out.Summary.ServedOwnPod++
		} else {
			out.Summary.AdmissionFailures++
		}
		out.Admissions = append(out.Admissions, res)
		// P runs from here on: the kubelet's status, with no lock left on the node for it.
		got.Status.Phase = corev1.PodRunning
		if _, err := cs.CoreV1().Pods(got.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			fatal(err)
		}
	}
}

// admit makes the kubelet's Allocate calls for pod p, each as the device plugin starts it:
// util.GetPendingPod for the pod being served, then plugin.GetNextDeviceRequest for the container
// and its cards, the served entry erased from to-allocate (the plugin's popNextContainerDevices
// and patchErasedAnnotation, unexported: the erase is re-done here on HAMi's encoder), and
// plugin.PodAllocationTrySuccess. Returns the first failure as the device plugin would report it.
func admit(ctx context.Context, node string, p *corev1.Pod, res *admitOut) string {
	ctrs := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
	for _, ctr := range ctrs {
		want := asked(ctr)
		if want == 0 {
			continue
		}
		res.Calls++
		current, err := util.GetPendingPod(ctx, node)
		if err != nil {
			return "GetPendingPod: " + err.Error()
		}
		res.Served = key(current)
		if res.Served != key(p) {
			return fmt.Sprintf("container %s of %s served for pod %s", ctr.Name, key(p), res.Served)
		}
		gotCtr, devs, err := plugin.GetNextDeviceRequest(nvidia.NvidiaGPUDevice, *current)
		if err != nil {
			return "GetNextDeviceRequest: " + err.Error()
		}
		if gotCtr.Name != ctr.Name {
			return fmt.Sprintf("kubelet allocates %s, the annotation serves %s", ctr.Name, gotCtr.Name)
		}
		if int64(len(devs)) != want {
			return fmt.Sprintf("%s: device number not matched (%d cards, asks %d)", ctr.Name, len(devs), want)
		}
		podDevs, err := device.DecodePodDevices(device.InRequestDevices, current.Annotations)
		if err != nil {
			return "decode to-allocate: " + err.Error()
		}
		single := podDevs[nvidia.NvidiaGPUDevice]
		for i := range single {
			if len(single[i]) > 0 {
				single[i] = device.ContainerDevices{}
				break
			}
		}
		erased := map[string]string{device.InRequestDevices[nvidia.NvidiaGPUDevice]: device.EncodePodSingleDevice(single)}
		if err := util.PatchPodAnnotations(current, erased); err != nil {
			return "erase: " + err.Error()
		}
		plugin.PodAllocationTrySuccess(node, nvidia.NvidiaGPUDevice, nvidia.NodeLockNvidia, current)
	}
	return ""
}

type podFields struct{ p *corev1.Pod }

func (f podFields) Has(field string) bool { _, ok := f.lookup(field); return ok }
func (f podFields) Get(field string) string {
	v, _ := f.lookup(field)
	return v
}
func (f podFields) lookup(field string) (string, bool) {
	switch field {
	case "spec.nodeName":
		return f.p.Spec.NodeName, true
	case "metadata.name":
		return f.p.Name, true
	case "metadata.namespace":
		return f.p.Namespace, true
	case "status.phase":
		return string(f.p.Status.Phase), true
	}
	return "", false
}

func fieldSet(p *corev1.Pod) podFields { return podFields{p} }

// quietKlog keeps HAMi's Info logging (its encoders log every call) off stdout and stderr.
func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "xpupool-hami-check:", err)
	os.Exit(1)
}
