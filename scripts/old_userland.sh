#!/usr/bin/env bash
# The oldest Linux userland that can be assembled here, for the install tests of the release
# artefacts (scripts/check_wheel.sh, scripts/check_cli.sh): Ubuntu 16.04 "xenial" (glibc 2.23,
# older than EL8's 2.28) from archive.ubuntu.com by debootstrap, with CPython 3.9 built inside it
# from Debian's source tarball (xenial's own Python is 3.5; python.org and the older archives are
# not reachable here). Where archive.ubuntu.com cannot be reached, Debian 11 "bullseye" (glibc
# 2.31, its own CPython 3.9) from deb.debian.org instead, said on stderr.
# The folder is kept between runs (about 500 MB; the first run takes a few minutes):
#   bash scripts/old_userland.sh            prints the folder, building it when missing
#   NEXTSTAT_OLD_USERLAND=DIR               where it lives (default ~/.cache/nextstat/<suite>-py39)
# In it, /opt/python3.9/bin/python3.9 is the interpreter. Needs root (debootstrap, chroot) or
# sudo, and debootstrap (installed with apt-get if missing).
set -euo pipefail
ubuntu=http://archive.ubuntu.com/ubuntu
debian=http://deb.debian.org/debian
python_src=$debian/pool/main/p/python3.9/python3.9_3.9.2.orig.tar.xz

suite=${NEXTSTAT_OLD_USERLAND_SUITE:-}   # xenial or bullseye; default: xenial where reachable
if [ -n "$suite" ]; then
  :
elif curl -sfI --max-time 20 "$ubuntu/dists/xenial/Release" >/dev/null; then
  suite=xenial
else
  suite=bullseye
  echo "archive.ubuntu.com is not reachable: Debian 11 (glibc 2.31) instead of Ubuntu 16.04" >&2
fi
root=${NEXTSTAT_OLD_USERLAND:-$HOME/.cache/nextstat/$suite-py39}
if [ -f "$root/.ready" ]; then
  echo "$root"
  exit 0
fi
sudo_cmd=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] ||
  { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq debootstrap >/dev/null; }
export PATH=$PATH:/usr/sbin:/sbin

echo "building the $suite userland in $root (once)" >&2
$sudo_cmd rm -rf "$root"
mkdir -p "$(dirname "$root")"
if [ $suite = xenial ]; then
  $sudo_cmd debootstrap --variant=minbase --components=main \
    --include=build-essential,zlib1g-dev,libffi-dev xenial "$root" "$ubuntu" >&2
  $sudo_cmd curl -sSfL "$python_src" -o "$root/tmp/python.tar.xz"
  # No ssl module (xenial's OpenSSL 1.0.2 is too old for 3.9's): the tests install from local
  # wheels only (pip --no-index).
  $sudo_cmd chroot "$root" /bin/sh -ec '
    cd /tmp && tar xf python.tar.xz && cd Python-3.9.2
    ./configure --prefix=/opt/python3.9 --with-ensurepip=install >/dev/null
    make -j"$(nproc)" >/dev/null 2>&1
    make install >/dev/null 2>&1
    cd /tmp && rm -rf Python-3.9.2 python.tar.xz' >&2
else
  $sudo_cmd debootstrap --variant=minbase --include=python3,python3-venv bullseye "$root" "$debian" >&2
  $sudo_cmd mkdir -p "$root/opt/python3.9/bin"
  $sudo_cmd ln -s /usr/bin/python3.9 "$root/opt/python3.9/bin/python3.9"
fi
$sudo_cmd chroot "$root" /opt/python3.9/bin/python3.9 -c "import zlib, ctypes, venv, sys; print(sys.version)" >&2
$sudo_cmd touch "$root/.ready"
echo "$root"
