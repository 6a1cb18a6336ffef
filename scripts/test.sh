#!/usr/bin/env bash
# The whole test suite: Rust unit/integration/property tests, then the live pyhf parity tests.
# Installs what it needs (a Python venv with requirements-test.txt) on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the time goes, on stderr (CI keeps a full run under 45 minutes).
mark() { echo "[test.sh] $1 done at $SECONDS s" >&2; }

if [ ! -d ../shared/pyhf-ref ]; then
  echo "error: ../shared/pyhf-ref is missing (the parity data lives beside the repository)" >&2
  exit 2
fi

# The f32 GPU backend's tests run for real on Mesa's lavapipe, a Vulkan driver on the CPU
# (tests/f32_parity.rs): install it where it is missing (Debian/Ubuntu).
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
  sudo_cmd=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi
# The report's page is checked in a headless browser (tests/python/test_plots.py).
if ! command -v chromium >/dev/null 2>&1; then
  sudo_cmd=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi
# A fresh clone gains nothing from incremental state but its disk (~2 GB under target/debug).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# lavapipe wants a runtime directory; without one it only complains on stderr.
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}

mark "system packages"
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r requirements-test.txt
mark "Python requirements"
# The commit the builds record (nextstat.build_info(), nextstat --version; checked by the tests),
# set before the first build so that no later build sees it change.
export NEXTSTAT_BUILT_FROM=$(git rev-parse --short=12 HEAD)
# Lints as CI enforces them (clippy's, warnings denied), inside the builds the suite needs anyway:
# clippy's driver compiles every workspace crate (tests, examples, benches, the Python extension),
# so no separate check pass compiles every dependency a second time. Dependencies are not linted.
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
if [ -z "$clippy_driver" ]; then
  echo "error: clippy-driver is missing (rustup component add clippy): the lints run inside the builds" >&2
  exit 2
fi
export RUSTC_WORKSPACE_WRAPPER=$clippy_driver
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The release builds (wheel, CLI) embed the CUDA kernels compiled ahead of time (NVRTC from pip,
# no GPU), as a release does: the Python suite tests the released binaries. The debug test
# builds do not (they compile kernels at first use, as a development build does).
# NVRTC's minutes on one core run beside the debug build of the tests.
mkdir -p target
PYTHON=.venv/bin/python bash scripts/prebuild_kernels.sh > target/prebuild-kernels.env &
prebuild=$!
if cargo nextest --version >/dev/null 2>&1; then nextest=1; else nextest=; fi
if [ -n "$nextest" ]; then
  cargo nextest run --workspace --all-targets --no-run
else
  cargo test --workspace --all-targets --no-run
fi
mark "debug build and lints"
wait $prebuild
kernels=$(sed 's/^export NEXTSTAT_PREBUILT_KERNELS=//' target/prebuild-kernels.env)
mark "CUDA kernels"
# The Python package as released: the manylinux2014 abi3 wheel (scripts/build_wheel.sh), installed
# by pip, then installed and run in an old userland (glibc 2.23) by scripts/check_wheel.sh.
# The release CLI and server come out of the same build, linked as the wheel is (glibc 2.17): the
# Python suite runs them hundreds of times on large models.
NEXTSTAT_PREBUILT_KERNELS=$kernels NEXTSTAT_WHEEL_BINS="ns-cli ns-server" WHEEL_DIR=target/wheels \
  bash scripts/build_wheel.sh >/dev/null
release_bin=$PWD/target/x86_64-unknown-linux-gnu/release
wheel=$(ls target/wheels/nextstat-*manylinux*x86_64*.whl)
.venv/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
mark "Python package"
bash scripts/check_wheel.sh "$wheel"
mark "old-glibc install"

nvrtc_lib=$(.venv/bin/python -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
# The CUDA kernels compiled by NVRTC (a pip package; no GPU needed) with the header generated
# from Rust: the struct-layout checks of ns_compute::cuda::abi (the ignored tests of the
# libraries, reported as ignored in the first run). The same test binaries: nothing is rebuilt.
if [ -n "$nextest" ]; then
  cargo nextest run --workspace --no-fail-fast
  LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" cargo nextest run --workspace --lib --run-ignored ignored-only
else
  cargo test --workspace --no-fail-fast
  LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" cargo test --workspace --lib -- --ignored
fi
mark "Rust tests"
# The Metal parts of the f32 backend (wgpu's, behind ns-compute's `wgpu` feature; the project has
# no platform code of its own) type-check for Apple silicon where the target installs (no Mac
# here: docs/gpu-f32.md says what stays unverified).
if rustup target add aarch64-apple-darwin >/dev/null 2>&1; then
  cargo check --quiet -p ns-compute --features wgpu --target aarch64-apple-darwin
fi
mark "macOS type-check"

# On every core, at most four (each worker imports torch, JAX and ROOT).
workers=$(nproc); [ "$workers" -gt 4 ] && workers=4
NEXTSTAT_PREBUILT_KERNELS=$kernels NEXTSTAT_BIN="$release_bin/nextstat" .venv/bin/python -m pytest tests/python -q -n "$workers" --timeout 900 --timeout-method thread --durations=30
mark "Python tests"
