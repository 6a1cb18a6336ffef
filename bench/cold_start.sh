#!/usr/bin/env bash
# The first GPU call on a fresh machine against a warm one: whole `nextstat fit` processes on
# WS.json, timed (wall seconds). "prebuilt": the kernels embedded in the binary; "NVRTC": a
# register budget no embedded cubin was built for (NEXTSTAT_FIT_MIN_BLOCKS=5), so the kernels
# are compiled at first use, as on an architecture the build does not cover.
set -euo pipefail
ws=$1
bin=${NEXTSTAT_BIN:-dist-gpu/nextstat}
wall() { local t0=$EPOCHREALTIME; "$@" >/dev/null; python3 -c "print(f'{$EPOCHREALTIME - $t0:.2f}')"; }
empty() { rm -rf /tmp/ns-cold && mkdir -p /tmp/ns-cold && echo /tmp/ns-cold; }
printf 'cpu fit                              %s s\n' "$(wall "$bin" fit "$ws" --gpu cpu)"
printf 'cuda fit, first call (prebuilt)      %s s\n' "$(NEXTSTAT_KERNEL_CACHE=$(empty) wall "$bin" fit "$ws" --gpu cuda)"
printf 'cuda fit, second call                %s s\n' "$(NEXTSTAT_KERNEL_CACHE=/tmp/ns-cold wall "$bin" fit "$ws" --gpu cuda)"
printf 'cuda fit, first call (NVRTC)         %s s\n' "$(NEXTSTAT_FIT_MIN_BLOCKS=5 NEXTSTAT_KERNEL_CACHE=$(empty) wall "$bin" fit "$ws" --gpu cuda)"
printf 'cuda fit, second call (NVRTC cached) %s s\n' "$(NEXTSTAT_FIT_MIN_BLOCKS=5 NEXTSTAT_KERNEL_CACHE=/tmp/ns-cold wall "$bin" fit "$ws" --gpu cuda)"
"$bin" devices
