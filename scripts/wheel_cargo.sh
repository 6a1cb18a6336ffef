#!/usr/bin/env bash
# The cargo that scripts/build_wheel.sh hands maturin. It runs maturin's command as it is, then,
# where NEXTSTAT_WHEEL_BINS names packages (e.g. "ns-cli ns-server"), builds their binaries in
# maturin's own environment (target, zig linker for glibc 2.17, release profile): every
# dependency the extension compiled is reused, so the release CLI and the wheel cost one build.
set -euo pipefail
if [ -n "${NEXTSTAT_WHEEL_BINS:-}" ]; then
  # Both builds resolve dependency features over the whole workspace, not over the packages each
  # selects (which differ: the CLI's serde_json has raw_value, the extension's num-complex its
  # defaults, ...), so their dependencies are one build. Cargo's workspace feature unification
  # is still unstable; maturin already runs cargo on the same channel override for its
  # target-applies-to-host, and without it cargo only warns and builds the dependencies twice.
  export __CARGO_TEST_CHANNEL_OVERRIDE_DO_NOT_USE_THIS=nightly CARGO_UNSTABLE_FEATURE_UNIFICATION=true \
    CARGO_RESOLVER_FEATURE_UNIFICATION=workspace
fi
cargo "$@"
[ "${1:-}" = rustc ] && [ -n "${NEXTSTAT_WHEEL_BINS:-}" ] || exit 0
target=
while [ $# -gt 0 ]; do
  case $1 in --target) target=$2; shift ;; --) break ;; esac
  shift
done
packages=()
for p in $NEXTSTAT_WHEEL_BINS; do packages+=(-p "$p"); done
# maturin reads this command's standard output as cargo's JSON messages: the binaries' build
# speaks on stderr only.
cargo build --quiet --profile release ${target:+--target "$target"} --bins "${packages[@]}" >&2
