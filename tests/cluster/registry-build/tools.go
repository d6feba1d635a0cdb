//go:build tools

// Package tools records the command build-registry compiles, so `go mod tidy`
// keeps every module it needs in go.sum. It is never built itself.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
