//go:build tools

// Package tools records the commands build-containerd compiles, so `go mod tidy`
// keeps every module they need in go.sum. It is never built itself.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
