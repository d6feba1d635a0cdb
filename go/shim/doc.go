// Package shim is a Go client for the stepshim protocol, version 1 (protocol/PROTOCOL.md, which is
// normative; this package follows it and nothing else).
//
// [Client] speaks the routes one to one (info, spawn, status and wait, list, output, stdin, signal,
// resize, delete, files, grants and pulls, images, properties, metrics) and adds the loops every
// caller needs: [Client.Run] spawns idempotently across lost answers, [Client.Follow] reads output to
// the exit frame, resuming from the last frame boundary whenever a connection breaks, and
// [StdinWriter] sends stdin with offsets so that a retried request is harmless. Concourse's ATC
// runtime shapes (Container, Process, Volume) are package stepshim.dev/go/atcruntime, built on this
// one.
//
// A shim serves plain HTTP ([New]) or, given a TLS seed, TLS 1.3 only ([NewTLS]): the client pins
// the shim's Ed25519 key instead of trusting any certificate authority. A controller derives the
// seed from the pod token ([TLSSeed], for STEPSHIM_TLS_SEED) and the pin from the seed ([TLSPin],
// [TLSPinOfToken]); [PinnedTLSConfig] is the handshake's configuration for other HTTP stacks.
//
// Errors the shim answers are [*APIError]; use [IsNotFound], [IsConflict], [IsUnauthorized],
// [HasCode] or errors.Is with [ErrExecutableNotFound] to tell them apart. An answer past one of this
// client's bounds is a [*LimitError] (errors.Is with [ErrAnswerTooLarge]) and is never retried.
// Anything else is a transport error, which the loops above retry.
//
// # Layout
//
//   - client.go: Client, request plumbing and the shim-wide one-request routes (healthz, info,
//     metrics).
//   - processes.go: the process routes that are one request each (spawn, status, wait, list,
//     signal, resize, delete).
//   - retry.go: the retry loop and its backoff.
//   - tls.go: TLSSeed, TLSPin, PinnedTLSConfig and NewTLS (PROTOCOL.md 1.1).
//   - types.go: the JSON bodies of PROTOCOL.md section 4.
//   - errors.go: APIError, error codes and the functions that classify errors.
//   - limits.go: the bounds on every answer read (JSON, error bodies, drains, heads) and LimitError.
//   - frames.go: the frame decoder of section 5.2, which tracks the resume offset.
//   - output.go: one output request, and Follow, the resuming loop over it.
//   - stdin.go: one stdin request, and StdinWriter, the retrying, offset-keeping writer.
//   - files.go: tar streams in and out.
//   - filelength.go: the length and ETag of a tar stream, without its bytes (HEAD).
//   - artifacts.go: grants, pulls, and resumable tar streams (sections 4.10, 4.11).
//   - images.go: the manifest of an image a shim serves under /v2/ (section 4.12).
//   - properties.go: a shim's properties.
//   - version.go: ProtocolVersion and CheckProtocol, which a caller runs once per shim before
//     anything else (docs/compatibility.md).
package shim
