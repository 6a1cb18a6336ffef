#!/usr/bin/env bash
# Proof that the released CLI binaries run where they claim to:
#   - the glibc build in the oldest userland that can be assembled here (Ubuntu 16.04, glibc 2.23;
#     scripts/old_userland.sh): its newest glibc symbol, then a fit and an upper limit;
#   - the static (musl) build in an empty root: nothing but the binary, the example and the kernel.
#   bash scripts/check_cli.sh GLIBC_BINARY MUSL_BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
glibc_bin=$(realpath "$1")
musl_bin=$(realpath "$2")
sudo_cmd=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
expected=$("$glibc_bin" upper-limit examples/analysis.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["obs"])')

newest=$(objdump -T "$glibc_bin" | grep -o "GLIBC_[0-9.]*" | sort -u -t. -k2,2n -k3,3n | tail -1)
echo "glibc build: newest glibc symbol $newest"
root=$(bash scripts/old_userland.sh)
$sudo_cmd mkdir -p "$root/tmp/nextstat-cli"
$sudo_cmd cp "$glibc_bin" "$root/tmp/nextstat-cli/nextstat"
$sudo_cmd cp examples/analysis.json "$root/tmp/nextstat-cli/"
old_glibc=$($sudo_cmd chroot "$root" /usr/bin/getconf GNU_LIBC_VERSION)
old=$($sudo_cmd chroot "$root" /bin/sh -ec 'cd /tmp/nextstat-cli && ./nextstat version --json >&2 &&
  ./nextstat fit analysis.json >/dev/null && ./nextstat upper-limit analysis.json')

empty=$(mktemp -d)
cp "$musl_bin" "$empty/nextstat"
cp examples/analysis.json "$empty/"
file "$musl_bin" | grep -q -E "statically linked|static-pie linked" || { echo "error: $musl_bin is not static" >&2; exit 1; }
bare=$($sudo_cmd chroot "$empty" /nextstat upper-limit /analysis.json)
$sudo_cmd chroot "$empty" /nextstat version >&2
rm -rf "$empty"

python3 - "$expected" "$old" "$bare" "$old_glibc" <<'PY'
import json, sys
expected = float(sys.argv[1])
for name, text in [(f"glibc build on {sys.argv[4]}", sys.argv[2]), ("static build in an empty root", sys.argv[3])]:
    limit = json.loads(text)["obs"]
    assert abs(limit - expected) <= 1e-9 * expected, (name, limit, expected)
    print(f"{name}: observed limit {limit:.10f} (here {expected:.10f})")
PY
