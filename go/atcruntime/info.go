// The worker as ATC's registrar records it (atc.Worker): its platform, tags, team and base
// resource types from the configuration, and what it runs now, counted from the kit's informer and
// the holder's volumes, for ATC's container placement strategies.

package atcruntime

import (
	"context"
	"slices"
)

// WorkerInfo is what ATC registers of a worker, the fields a Kubernetes worker has of atc.Worker.
type WorkerInfo struct {
	Name     string
	Platform string
	// Team, when set, makes the worker its team's only; Tags route steps that name them.
	Team string
	Tags []string
	// ResourceTypes are the base resource types, by type.
	ResourceTypes []WorkerResourceType
	// ActiveContainers counts the worker's step pods that are not ending (the holder aside).
	ActiveContainers int
	// ActiveVolumes counts the volumes that outlive their pods, the holder's (caches, uploads,
	// copies of images); a container's own directories live and go with its pod.
	ActiveVolumes int
}

// WorkerResourceType is a base resource type as ATC registers it.
type WorkerResourceType struct {
	Type, Image, Version string
	Privileged           bool
}

// ResourceTypeInfo is what ATC registers of a base resource type besides its image
// (Config.ResourceTypes): its version, and whether its containers run privileged.
type ResourceTypeInfo struct {
	Version    string
	Privileged bool
}

// Info is the worker as ATC's registrar records it, counted now: one look at the informer's cache
// and, when the holder runs, one listing of its volumes.
func (w *Worker) Info(ctx context.Context) (WorkerInfo, error) {
	info := WorkerInfo{Name: w.Name(), Platform: w.cfg.Platform, Team: w.cfg.Team, Tags: slices.Clone(w.cfg.Tags)}
	if info.Platform == "" {
		info.Platform = "linux"
	}
	types := make([]string, 0, len(w.cfg.ResourceTypes))
	for t := range w.cfg.ResourceTypes {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		ri := w.cfg.ResourceTypeInfo[t]
		info.ResourceTypes = append(info.ResourceTypes, WorkerResourceType{Type: t, Image: w.cfg.ResourceTypes[t],
			Version: ri.Version, Privileged: ri.Privileged})
	}
	for _, p := range w.kit.List() {
		if p.DeletionTimestamp == nil && p.Name != w.vols.HolderPod() {
			info.ActiveContainers++
		}
	}
	c, ok, err := w.vols.holderShim(ctx)
	if err != nil || !ok {
		return info, err
	}
	metas, err := w.vols.listMeta(ctx, c)
	info.ActiveVolumes = len(metas)
	return info, err
}
