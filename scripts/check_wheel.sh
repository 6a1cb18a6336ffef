#!/usr/bin/env bash
# Proof that a wheel runs where its tag says: auditwheel's verdict (the newest glibc symbol it
# needs must be <= 2.17, manylinux2014), then an install with pip in the oldest userland that can
# be assembled here (Ubuntu 16.04, glibc 2.23, CPython 3.9: scripts/old_userland.sh) and a fit and
# a hypotest there, equal to the same wheel's numbers on this machine.
#   bash scripts/check_wheel.sh dist/nextstat-*-manylinux*_x86_64.whl
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=$(realpath "$1")
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
# Absolute, not resolved: a venv's interpreter is a link that must keep its name.
case $python in */*) python=$(realpath -s "$python") ;; esac
"$python" -c 'import auditwheel' 2>/dev/null ||
  "$python" -m pip install --quiet --disable-pip-version-check -r requirements-build.txt

# 1. The platform tag and the newest glibc symbol version.
show=$("$python" -m auditwheel show "$wheel")
echo "$show" | tr '\n' ' ' | grep -q 'consistent with the following platform tag: "manylinux_2_17_x86_64"' ||
  { echo "error: $wheel is not manylinux_2_17 (manylinux2014):" >&2; echo "$show" >&2; exit 1; }
newest=$(echo "$show" | grep -o "GLIBC_[0-9.]*" | sort -t. -k2,2n -k3,3n | tail -1)
echo "auditwheel: manylinux_2_17_x86_64; newest glibc symbol $newest"

# 2. Installed and run in the old userland.
root=$(bash scripts/old_userland.sh)
sudo_cmd=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
work=$root/tmp/nextstat-check
$sudo_cmd rm -rf "$work"
$sudo_cmd mkdir -p "$work/wheels"
$sudo_cmd cp "$wheel" examples/analysis.json "$work/wheels/"
# numpy for CPython 3.9 as pip would pick it on such a machine (downloaded here, kept in pip's cache).
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform manylinux2014_x86_64 --python-version 3.9 --implementation cp --abi cp39 \
  "numpy==1.26.4" -d "$work/wheels" >&2
cat > "$work/run.py" <<'PY'
import json, sys
import nextstat
ws = nextstat.Workspace("/tmp/nextstat-check/wheels/analysis.json")
model = ws.model()
fit = nextstat.fit(model)
cls = nextstat.hypotest(1.0, model)
print(json.dumps({"libc": __import__("platform").libc_ver()[1], "python": sys.version.split()[0],
                  "build": nextstat.build_info(), "converged": bool(fit.converged),
                  "twice_nll": float(fit.twice_nll), "cls_obs": float(cls.cls_obs)}))
PY
# A fresh virtual environment each time; /proc as a real machine has it, in a private mount.
$sudo_cmd unshare --mount --fork sh -ec "
  mount -t proc proc '$root/proc'
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 chroot '$root' /bin/sh -ec '
    cd /tmp/nextstat-check
    /opt/python3.9/bin/python3.9 -m venv venv
    venv/bin/python -m pip install --quiet --disable-pip-version-check --no-index --find-links wheels nextstat
    venv/bin/python run.py > old.json'" >&2
old=$work/old.json
"$python" - "$old" <<'PY'
import json, sys
import nextstat
old = json.load(open(sys.argv[1]))
model = nextstat.Workspace("examples/analysis.json").model()
here = {"twice_nll": float(nextstat.fit(model).twice_nll),
        "cls_obs": float(nextstat.hypotest(1.0, model).cls_obs)}
assert old["converged"], old
for key, value in here.items():
    assert abs(old[key] - value) <= 1e-9 * abs(value), (key, old[key], value)
print(f"old userland: glibc {old['libc']}, CPython {old['python']}: nextstat {old['build']['version']} "
      f"({old['build']['git_commit']}) fit twice_nll {old['twice_nll']:.10f}, CLs_obs(mu=1) "
      f"{old['cls_obs']:.10f} (here {here['cls_obs']:.10f})")
PY
