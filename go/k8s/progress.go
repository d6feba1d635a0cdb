// Where a step pod is on its way to ready, read from its status alone (no API calls), by the same
// rules as the Rust controller's progress.rs: the phases a person waiting for a step wants to see, and
// the reasons that mean it will never start (image pull errors, config errors, crash loops, a failed
// init container, a dead or OOM-killed pod), in Kubernetes' own words. protocol/testdata/progress.json
// holds statuses both sides must read alike.

package k8s

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Stage is a step of a pod's way to ready.
type Stage string

// The stages, in the order a healthy pod passes them; Failed can come at any point.
const (
	// Unknown: not (yet) in the informer's cache.
	Unknown Stage = "unknown"
	// Scheduling: waiting for a node; Detail is the scheduler's message (e.g. why it is unschedulable).
	Scheduling Stage = "scheduling"
	// Pulling: pulling images and creating containers.
	Pulling Stage = "pulling"
	// Starting: containers starting, or the shim not yet answering its readiness probe.
	Starting Stage = "starting"
	// Ready: running and ready; Detail is the pod IP.
	Ready Stage = "ready"
	// Failed: will never be ready; Reason and Detail are Kubernetes' reason and message.
	Failed Stage = "failed"
)

// Progress is where a pod is on its way to ready.
type Progress struct {
	Stage Stage
	// Reason is Kubernetes' reason when Stage is Failed (ErrImagePull, OOMKilled, ...).
	Reason string
	// Detail is the message of the stage, or the pod IP when Ready.
	Detail string
}

// String reads as the Rust controller's Display does: "scheduling (0/1 nodes are available: ...)".
func (p Progress) String() string {
	switch p.Stage {
	case Scheduling:
		return "scheduling" + suffix(p.Detail)
	case Pulling:
		return "pulling images and creating containers" + suffix(p.Detail)
	case Starting:
		return "starting" + suffix(p.Detail)
	case Ready:
		return "ready at " + p.Detail
	case Failed:
		return "failed: " + p.Reason + suffix(p.Detail)
	default:
		return "creating"
	}
}

func suffix(m string) string {
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

// fatalWaiting are the reasons of a waiting container that mean the pod will not start without a change.
var fatalWaiting = []string{
	"ErrImagePull",
	"ImagePullBackOff",
	"ErrImageNeverPull",
	"InvalidImageName",
	"CreateContainerConfigError",
	"CreateContainerError",
	"RunContainerError",
	"CrashLoopBackOff",
}

// ProgressOf reads a pod's progress from its status; a nil pod is Unknown.
func ProgressOf(pod *corev1.Pod) Progress {
	if pod == nil {
		return Progress{Stage: Unknown}
	}
	st := &pod.Status
	phase := st.Phase
	if phase == "" {
		phase = corev1.PodPending
	}
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
		p := Progress{Stage: Failed, Reason: st.Reason, Detail: st.Message}
		if p.Reason == "" {
			p.Reason = "pod " + strings.ToLower(string(phase))
		}
		if p.Detail == "" {
			p.Detail = "the shim exited"
		}
		return p
	}
	statuses := slices.Concat(st.InitContainerStatuses, st.ContainerStatuses)
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil && slices.Contains(fatalWaiting, w.Reason) {
			return Progress{Stage: Failed, Reason: w.Reason, Detail: w.Message}
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := t.Message
			if msg == "" {
				msg = t.Reason
			}
			return Progress{Stage: Failed, Reason: fmt.Sprintf("container %s exited %d", cs.Name, t.ExitCode), Detail: msg}
		}
	}
	if c := condition(st, corev1.PodScheduled); c == nil {
		return Progress{Stage: Scheduling}
	} else if c.Status != corev1.ConditionTrue {
		return Progress{Stage: Scheduling, Detail: c.Message}
	}
	for _, cs := range statuses {
		if w := cs.State.Waiting; w != nil {
			detail := cs.Name + ": " + w.Reason
			switch w.Reason {
			case "ContainerCreating", "PodInitializing", "ImagePullBackOff", "ErrImagePull":
				return Progress{Stage: Pulling, Detail: detail}
			}
			return Progress{Stage: Starting, Detail: detail}
		}
	}
	if len(st.ContainerStatuses) == 0 && phase == corev1.PodPending {
		return Progress{Stage: Pulling, Detail: "creating containers"}
	}
	ready := condition(st, corev1.PodReady)
	if st.PodIP != "" && ready != nil && ready.Status == corev1.ConditionTrue && phase == corev1.PodRunning {
		return Progress{Stage: Ready, Detail: st.PodIP}
	}
	return Progress{Stage: Starting, Detail: "waiting for the shim's readiness"}
}

func condition(st *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
