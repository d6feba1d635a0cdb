// JSON bodies of the protocol (PROTOCOL.md section 4). Responses may carry fields this version does
// not know; they are ignored. Requests carry only fields of version 1, since the shim refuses others.

package shim

import "time"

// Info is the answer of GET /v1/info.
type Info struct {
	// Protocol is the protocol version the shim speaks (ProtocolVersion for a shim this package serves).
	Protocol int `json:"protocol"`
	// Version is the shim's release.
	Version string `json:"version"`
	// BootID changes at every start of the shim; a different BootID means every process is gone.
	BootID string `json:"boot_id"`
}

// TTYSize is the size of a pseudo-terminal, in character cells.
type TTYSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Spec is the body of a spawn (PROTOCOL.md 4.2). Zero values mean the protocol's defaults, so a Spec
// sent twice compares equal on the shim whether or not defaults were spelled out.
type Spec struct {
	// Path is the executable, and argv[0]; without a '/' it is searched in PATH.
	Path string `json:"path"`
	// Args are argv[1:].
	Args []string `json:"args,omitempty"`
	// Env are K=V entries overlaid on the shim's environment.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory, created if missing; empty means the shim's.
	Dir string `json:"dir,omitempty"`
	// User is uid, uid:gid, name or name:group; empty means the shim's user.
	User string `json:"user,omitempty"`
	// Stdin gives the process a stdin pipe fed by the stdin route; otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TTY, if set, runs the process on a new pseudo-terminal of that size.
	TTY *TTYSize `json:"tty,omitempty"`
}

// Exit is how a process ended.
type Exit struct {
	// Code is the exit code, or nil if a signal killed the process.
	Code *int `json:"code"`
	// Signal is the number of the signal that killed the process, or nil.
	Signal *int `json:"signal"`
	// Status is Code, or 128 + Signal.
	Status int `json:"status"`
	// Reason is a cause the status does not tell, when the shim knows one: "oom_kill".
	Reason string `json:"reason,omitempty"`
	// OOMKilled is true when the kernel's out-of-memory killer killed the process (Reason is
	// "oom_kill"); PROTOCOL.md 4.3 gives the rule and its limits. An older shim never sets it.
	OOMKilled bool `json:"oom_killed"`
}

// Process states.
const (
	StateRunning = "running"
	StateExited  = "exited"
)

// ProcessStatus is the shim's view of one process (PROTOCOL.md 4.3).
type ProcessStatus struct {
	ID    string `json:"id"`
	PID   int    `json:"pid"`
	State string `json:"state"`
	// Exit is nil while the process runs.
	Exit      *Exit      `json:"exit"`
	StartedAt time.Time  `json:"started_at"`
	ExitedAt  *time.Time `json:"exited_at"`
	// OutputEnd is the length of the output log: the offset just past its last frame.
	OutputEnd int64 `json:"output_end"`
	// StdinOffset counts the stdin bytes written to the process.
	StdinOffset int64 `json:"stdin_offset"`
	// StdinClosed tells whether EOF was sent.
	StdinClosed bool `json:"stdin_closed"`
	TTY         bool `json:"tty"`
}

// Exited reports whether the process has exited; its output log is then complete.
func (p *ProcessStatus) Exited() bool { return p.State == StateExited }

// StdinAck is the answer of the stdin route.
type StdinAck struct {
	// Offset is the number of stdin bytes the shim has accepted so far.
	Offset int64 `json:"stdin_offset"`
	// Closed tells whether stdin has been closed.
	Closed bool `json:"stdin_closed"`
}

type processList struct {
	Processes []ProcessStatus `json:"processes"`
}

type signalBody struct {
	Signal string `json:"signal"`
}
