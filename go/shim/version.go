// The protocol version this package speaks, and the check a caller makes once per shim before
// anything else (docs/compatibility.md): a shim of another protocol version is refused with one
// line naming both versions and what to upgrade.

package shim

import (
	"context"
	"errors"
	"fmt"
)

// ProtocolVersion is the protocol version this package implements: the only place the Go side
// writes it down. A shim whose GET /v1/info reports another one is refused by CheckProtocol.
const ProtocolVersion = 1

// ErrIncompatible matches (with errors.Is) an *IncompatibleError.
var ErrIncompatible = errors.New("incompatible shim protocol")

// IncompatibleError says the shim speaks another protocol version than this package.
type IncompatibleError struct {
	// Shim is the protocol version the shim reported.
	Shim int
	// ShimRelease is the shim's release (the version field of its info).
	ShimRelease string
	// Client is ProtocolVersion.
	Client int
}

func (e *IncompatibleError) Error() string {
	advice := fmt.Sprintf("upgrade the shim image (or ConfigMap) to a release of protocol %d", e.Client)
	if e.Shim > e.Client {
		advice = fmt.Sprintf("upgrade the worker (this Go client) to a release of protocol %d, "+
			"or run the pod with a shim image of protocol %d", e.Shim, e.Client)
	}
	return fmt.Sprintf("shim: the shim speaks protocol %d (stepshim %s) and this client protocol %d: %s",
		e.Shim, e.ShimRelease, e.Client, advice)
}

// Is makes errors.Is(err, ErrIncompatible) true.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }

// CheckProtocol asks GET /v1/info and returns it if the shim speaks ProtocolVersion, else an
// *IncompatibleError. Within one protocol version any release of the shim serves any release of
// this client; a route an older shim does not have answers 404 no_route (IsUnsupported).
func (c *Client) CheckProtocol(ctx context.Context) (*Info, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Protocol != ProtocolVersion {
		return nil, &IncompatibleError{Shim: info.Protocol, ShimRelease: info.Version, Client: ProtocolVersion}
	}
	return info, nil
}

// IsUnsupported reports whether err is a 404 no_route: the shim does not have the route, so it is an
// older release of the same protocol without the feature asked for.
func IsUnsupported(err error) bool { return HasCode(err, CodeNoRoute) }
