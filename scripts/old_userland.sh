#!/usr/bin/env bash
# The oldest Linux userland that can be assembled here, for the install tests of the release
# artefacts (scripts/release_check.sh): Ubuntu 16.04 "xenial" (glibc 2.23, older than EL8's 2.28)
# from archive.ubuntu.com by debootstrap, with CPython 3.9 built inside it from Debian's source
# tarball (xenial's own Python is 3.5; python.org and the older archives are not reachable here).
# The folder is kept between runs (about 400 MB; the first run takes a few minutes):
#   bash scripts/old_userland.sh            prints the folder, building it when missing
#   NEXTSTAT_OLD_USERLAND=DIR               where it lives (default ~/.cache/nextstat/xenial-py39)
# Needs root (debootstrap, chroot) or sudo, and debootstrap (installed with apt-get if missing).
set -euo pipefail
root=${NEXTSTAT_OLD_USERLAND:-$HOME/.cache/nextstat/xenial-py39}
python_src=http://deb.debian.org/debian/pool/main/p/python3.9/python3.9_3.9.2.orig.tar.xz
mirror=http://archive.ubuntu.com/ubuntu

if [ -f "$root/.ready" ]; then
  echo "$root"
  exit 0
fi
sudo_cmd=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo")
command -v debootstrap >/dev/null 2>&1 ||
  { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq debootstrap >/dev/null; }

echo "building the xenial userland in $root (once)" >&2
$sudo_cmd rm -rf "$root"
mkdir -p "$(dirname "$root")"
$sudo_cmd debootstrap --variant=minbase --components=main \
  --include=build-essential,zlib1g-dev,libffi-dev xenial "$root" "$mirror" >&2
curl -sSfL "$python_src" -o "$root/tmp/python.tar.xz"
# No ssl module (xenial's OpenSSL 1.0.2 is too old for 3.9's): the tests install from local
# wheels only (pip --no-index).
$sudo_cmd chroot "$root" /bin/sh -ec '
  cd /tmp && tar xf python.tar.xz && cd Python-3.9.2
  ./configure --prefix=/opt/python3.9 --with-ensurepip=install >/dev/null
  make -j"$(nproc)" >/dev/null 2>&1
  make install >/dev/null 2>&1
  cd /tmp && rm -rf Python-3.9.2 python.tar.xz
  /opt/python3.9/bin/python3.9 -c "import zlib, ctypes, sys; print(sys.version)"' >&2
$sudo_cmd touch "$root/.ready"
echo "$root"
