// The process routes that are one request each: spawn, status and wait, list, signal, resize,
// delete (PROTOCOL.md 4.2, 4.3, 4.5-4.7). Output and stdin streams are in output.go and stdin.go.

package shim

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// processPath is the route of process id, rest appended, once id is known to be safe in a path.
func processPath(id string, rest string) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	return "/v1/processes/" + id + rest, nil
}

// Spawn sends one PUT /v1/processes/{id}. created is true for 201 (a new process) and false for 200
// (a process with this id and an equal spec already exists, running or exited). A different spec
// answers 409 spec_conflict; a missing executable matches ErrExecutableNotFound.
func (c *Client) Spawn(ctx context.Context, id string, spec Spec) (p *ProcessStatus, created bool, err error) {
	path, err := processPath(id, "")
	if err != nil {
		return nil, false, err
	}
	p = new(ProcessStatus)
	status, err := c.doJSON(ctx, http.MethodPut, path, nil, spec, p)
	if err != nil {
		return nil, false, err
	}
	return p, status == http.StatusCreated, nil
}

// SpawnWait spawns like Spawn and waits up to max for the exit in the same request
// (PUT ?wait=S). A shim that does not know wait on a spawn answers at once; the rest of max is then
// waited with Wait, so the result is the same against any shim.
func (c *Client) SpawnWait(ctx context.Context, id string, spec Spec, max time.Duration) (p *ProcessStatus, created bool, err error) {
	path, err := processPath(id, "")
	if err != nil {
		return nil, false, err
	}
	started := time.Now()
	q := url.Values{"wait": {strconv.FormatFloat(max.Seconds(), 'f', 3, 64)}}
	p = new(ProcessStatus)
	status, err := c.doJSON(ctx, http.MethodPut, path, q, spec, p)
	if err != nil {
		return nil, false, err
	}
	created = status == http.StatusCreated
	rest := max - time.Since(started)
	if p.Exited() || rest < time.Second {
		return p, created, nil
	}
	p, err = c.Wait(ctx, id, rest)
	return p, created, err
}

// Run spawns like Spawn, retrying across transport errors and 5xx answers with backoff until the shim
// answers or ctx ends. This is safe because a spawn with an existing id and equal spec is answered
// with the existing process, so a retry after a lost answer does not start a second one.
func (c *Client) Run(ctx context.Context, id string, spec Spec) (*ProcessStatus, error) {
	var p *ProcessStatus
	err := c.retry(ctx, func() error {
		var err error
		p, _, err = c.Spawn(ctx, id, spec)
		return err
	})
	return p, err
}

// Status returns the process's current state.
func (c *Client) Status(ctx context.Context, id string) (*ProcessStatus, error) {
	return c.Wait(ctx, id, 0)
}

// Wait holds a GET /v1/processes/{id}?wait=S until the process has exited or max has passed (the shim
// caps it at 300 s), then returns the process in whatever state it is. max <= 0 answers at once.
func (c *Client) Wait(ctx context.Context, id string, max time.Duration) (*ProcessStatus, error) {
	path, err := processPath(id, "")
	if err != nil {
		return nil, err
	}
	var q url.Values
	if max > 0 {
		q = url.Values{"wait": {strconv.FormatFloat(max.Seconds(), 'f', 3, 64)}}
	}
	var p ProcessStatus
	if _, err := c.doJSON(ctx, http.MethodGet, path, q, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WaitExited long-polls until the process has exited, retrying transport errors, and returns it.
func (c *Client) WaitExited(ctx context.Context, id string) (*ProcessStatus, error) {
	for {
		var p *ProcessStatus
		err := c.retry(ctx, func() error {
			var err error
			p, err = c.Wait(ctx, id, 300*time.Second)
			return err
		})
		if err != nil || p.Exited() {
			return p, err
		}
	}
}

// List returns every process the shim remembers, ordered by id.
func (c *Client) List(ctx context.Context) ([]ProcessStatus, error) {
	var l processList
	if _, err := c.doJSON(ctx, http.MethodGet, "/v1/processes", nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Processes, nil
}

// Signal sends a signal to the process's group. sig is a name with or without "SIG" ("TERM",
// "SIGKILL") or a decimal number ("9").
func (c *Client) Signal(ctx context.Context, id, sig string) (*ProcessStatus, error) {
	path, err := processPath(id, "/signal")
	if err != nil {
		return nil, err
	}
	var p ProcessStatus
	if _, err := c.doJSON(ctx, http.MethodPost, path, nil, signalBody{Signal: sig}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Resize sets the size of the process's terminal; the kernel sends SIGWINCH to its foreground group.
func (c *Client) Resize(ctx context.Context, id string, size TTYSize) (*ProcessStatus, error) {
	path, err := processPath(id, "/resize")
	if err != nil {
		return nil, err
	}
	var p ProcessStatus
	if _, err := c.doJSON(ctx, http.MethodPost, path, nil, size, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Delete forgets the process and frees its output. A running process answers 409 still_running
// unless force, which kills its process group first.
func (c *Client) Delete(ctx context.Context, id string, force bool) error {
	path, err := processPath(id, "")
	if err != nil {
		return err
	}
	var q url.Values
	if force {
		q = url.Values{"force": {"1"}}
	}
	_, err = c.doJSON(ctx, http.MethodDelete, path, q, nil, nil)
	return err
}
