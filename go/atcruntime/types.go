// Package atcruntime is Concourse ATC's runtime contract (atc/runtime: Worker, Container, Process,
// Volume, P2PVolume, Artifact) on stepshim step pods, so that an ATC Kubernetes runtime is a thin
// mapping of its database types onto these.
//
// The semantics are ATC's, not the HTTP protocol's: the ctx given to Run or Attach bounds only the
// start; cancelling the ctx given to Process.Wait stops the process (TERM, a grace period with output
// still flowing, then KILL); a step pod that disappears fails the Wait of its processes at once with
// the pod's reason. Volumes have a lifetime of their own, apart from the step pods.
//
// # Containers and processes
//
// A container is a step pod named by its handle (worker.go): FindOrCreateContainer finds it or creates
// it from a ContainerSpec (containerspec.go) and sets it up once, until its shim holds PropertyReady.
// Container (container.go) runs processes: Run and Attach take a ctx for the start only, Attach
// replays the output from byte 0, AttachFrom resumes at a PodProcess.Offset the caller kept, Status
// answers just the outcome; Properties and SetProperty, whose signatures have no ctx, are bounded by
// Config.RequestTimeout (30 s). PodProcess (process.go) streams on a context of its own; Wait's ctx
// ending stops it (TERM, Config.StopGrace of 10 s with output, KILL, deleted); a pod that ends fails
// Wait with a *PodGoneError. Processes with generated ids are deleted from the shim once Wait has the
// result; those whose id the caller gave stay until the pod goes, so that an attach after a restart
// of ATC finds a process that has exited instead of running it again.
//
// This file holds the shared types; the implementations live in the other files of the package.
package atcruntime

import (
	"context"
	"io"
)

// Compression of a volume stream, by the names ATC uses.
type Compression string

// The encodings ATC asks for.
const (
	Raw  Compression = "raw"
	Gzip Compression = "gzip"
	Zstd Compression = "zstd"
	S2   Compression = "s2"
)

// ProcessSpec describes a process to run in a Container. An empty ID gets a generated one.
type ProcessSpec struct {
	ID   string
	Path string
	Args []string
	// Env is added to the container's environment and takes precedence over it.
	Env []string
	// Dir takes precedence over ContainerSpec.Dir.
	Dir string
	// User runs the process as this user; empty means the container's user.
	User string
	TTY  *TTYSpec
}

// TTYSpec is the terminal of a process.
type TTYSpec struct {
	WindowSize WindowSize
}

// WindowSize is a terminal size in character cells.
type WindowSize struct {
	Columns uint16
	Rows    uint16
}

// ProcessIO connects a process to the caller; nil writers discard.
type ProcessIO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// ProcessResult is how a process ended. ExitStatus is the exit code, or 128 + the signal number.
type ProcessResult struct {
	ExitStatus int
	// Signal names the signal that ended the process ("SIGKILL"), empty when it exited.
	Signal string
	// OOMKilled is true when the kernel's out-of-memory killer ended it.
	OOMKilled bool
}

// Process is a process started or attached to through a Container.
type Process interface {
	ID() string
	// Wait returns the result once the process has exited and all its output has been written.
	// Cancelling ctx stops the process: TERM, the grace period, KILL; Wait then returns ctx's error.
	Wait(ctx context.Context) (ProcessResult, error)
	SetTTY(tty TTYSpec) error
}

// Artifact is an output of a step that later steps can use.
type Artifact interface {
	// StreamOut is a tar stream of path ("." is the root) in the given compression.
	StreamOut(ctx context.Context, path string, compression Compression) (io.ReadCloser, error)
	// Handle is the artifact's globally unique id.
	Handle() string
	// Source names where it lives (the worker).
	Source() string
}

// Volume is a directory that can be mounted into a Container.
type Volume interface {
	Artifact
	// StreamIn extracts the tar stream r (in the given compression) under path, refusing more than
	// limitInMB megabytes of decompressed tar (0: no limit).
	StreamIn(ctx context.Context, path string, compression Compression, limitInMB float64, r io.Reader) error
}

// P2PVolume streams pod to pod without the caller carrying the bytes.
type P2PVolume interface {
	Volume
	// GetStreamInP2PURL is a URL naming path of this volume as a destination, which any process
	// holding the worker's key can act on (it describes itself; nothing is kept in memory).
	GetStreamInP2PURL(ctx context.Context, path string) (string, error)
	// StreamP2POut streams path of this volume to a URL from GetStreamInP2PURL.
	StreamP2POut(ctx context.Context, path, destURL string, compression Compression) error
}

// VolumeMount is a Volume at a path of a Container.
type VolumeMount struct {
	Volume    Volume
	MountPath string
}

// ExecutableNotFoundError is Run's error when the process's executable does not exist.
type ExecutableNotFoundError struct {
	Path string
	Err  error
}

func (e *ExecutableNotFoundError) Error() string {
	return "executable not found: " + e.Path + ": " + e.Err.Error()
}

func (e *ExecutableNotFoundError) Unwrap() error { return e.Err }
