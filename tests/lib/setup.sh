#!/usr/bin/env bash
# Installs what the project's builds and tests need on a fresh machine of this project's kind, and
# nothing already there: the musl target, rustfmt/clippy, cargo-fuzz, and the Debian packages the
# tests call (util-linux for unshare, procps, file, musl-tools for the TLS build's C). Safe to run
# again; prints what it installs.
set -euo pipefail

log() { echo "setup: $*" >&2; }

export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"

if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  log "adding the musl target"
  rustup target add x86_64-unknown-linux-musl
fi
for comp in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$comp"; then
    log "adding $comp"
    rustup component add "$comp"
  fi
done

missing=()
for pair in unshare:util-linux file:file ps:procps curl:curl musl-gcc:musl-tools; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "setup: need root to install ${missing[*]}" >&2; exit 1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo-fuzz >/dev/null; then
  log "installing cargo-fuzz (a few minutes, once)"
  cargo install cargo-fuzz --locked --quiet
fi
