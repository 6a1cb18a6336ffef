#!/usr/bin/env bash
# Every release artefact, into dist/ (no Docker, no CUDA toolkit, no GPU):
#   - Python wheels, manylinux2014 x86_64 and aarch64, abi3 (CPython >= 3.9), CUDA kernels
#     embedded (scripts/build_wheel.sh), and the sdist (builds with only a Rust toolchain);
#   - the CLI for Linux x86_64 twice: against glibc 2.17 (CUDA and Vulkan loaded at run time) and
#     statically linked with musl (CPU only; runs on a machine that has nothing but the kernel);
#   - SHA256SUMS.
# Then the checks of scripts/check_wheel.sh and scripts/check_cli.sh on the x86_64 artefacts.
#   bash scripts/release.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
# Absolute, not resolved: a venv's interpreter is a link that must keep its name.
case $python in */*) python=$(realpath -s "$python") ;; esac
"$python" -m pip install --quiet --disable-pip-version-check -r requirements-build.txt
rm -rf dist && mkdir -p dist
export NEXTSTAT_GIT_COMMIT=${NEXTSTAT_GIT_COMMIT:-$(git rev-parse --short=12 HEAD)}

# The kernels once, for the wheels and the glibc CLI.
[ -n "${NEXTSTAT_PREBUILT_KERNELS:-}" ] || eval "$(PYTHON=$python bash scripts/prebuild_kernels.sh)"
bash scripts/build_wheel.sh x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu >/dev/null
(cd bindings/ns-py && "$python" -m maturin sdist --out ../../dist) >&2

version=$(cargo pkgid -p ns-cli | sed 's/.*[#@]//')
bin_dir=$(dirname "$python")
# The glibc build: linked by zig against glibc 2.17's symbols.
rustup target list --installed | grep -qx x86_64-unknown-linux-gnu || rustup target add x86_64-unknown-linux-gnu
PATH="$bin_dir:$PATH" "$bin_dir/cargo-zigbuild" zigbuild --quiet --release -p ns-cli \
  --target x86_64-unknown-linux-gnu.2.17
cp target/x86_64-unknown-linux-gnu/release/nextstat "dist/nextstat-$version-x86_64-linux-gnu"
# The static build: no loader, so no GPU backends (CUDA and Vulkan are loaded at run time).
rustup target list --installed | grep -qx x86_64-unknown-linux-musl || rustup target add x86_64-unknown-linux-musl
cargo build --quiet --release -p ns-cli --no-default-features \
  --target x86_64-unknown-linux-musl
cp target/x86_64-unknown-linux-musl/release/nextstat "dist/nextstat-$version-x86_64-linux-musl"

# The line tables of the release profile stay in target/; the downloads are stripped.
strip dist/nextstat-*-linux-*
(cd dist && sha256sum -- * > SHA256SUMS)
ls -l dist
bash scripts/check_wheel.sh dist/nextstat-*manylinux*_x86_64*.whl
bash scripts/check_cli.sh "dist/nextstat-$version-x86_64-linux-gnu" "dist/nextstat-$version-x86_64-linux-musl"
