#!/bin/bash
# Charliecloud image 'torch': PyTorch 2.13.0 (CPU wheel) on Debian 12 with Python 3.11.
# GENERATED from containers/specs/torch.yaml by `orch container generate`: edit the spec,
# not this file (tests/test_containers.py fails when the two disagree).
#
# A directory image built without any registry: debootstrap a minimal Debian, then run the
# same install steps as containers/torch.def's %post inside it with chroot. Needs root.
#   orch container build torch --runtime charliecloud [--squash]   (cached by content)
#   bash containers/torch.charliecloud.sh IMAGE_DIR [WHEEL_DIR]    (by hand)
# Then: ch-run --unset-env='*' --set-env IMAGE_DIR -- python3 ...
set -euo pipefail

image=${1:?usage: $0 IMAGE_DIR [WHEEL_DIR]}
wheels=${2:-/opt/wheels}
die() { echo "torch.charliecloud.sh: $*" >&2; exit 1; }
((EUID == 0)) || die "debootstrap and chroot need root"
command -v debootstrap >/dev/null || die "debootstrap is not installed: apt-get install -y --no-install-recommends debootstrap"
[[ ! -e $image ]] || die "$image exists: remove it first"
compgen -G "$wheels/torch-2.13.0+cpu-*.whl" >/dev/null || die "no torch-2.13.0+cpu-*.whl in $wheels (the wheel directory)"
rootfs=$image.partial
# Whatever is still mounted below the tree (debootstrap can leave its /proc mounted).
unmount_all() {
  local m
  for m in $(awk -v r="$rootfs/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m"
  done
}
rm -rf --one-file-system "$rootfs"
# A failed build leaves nothing behind.
trap 'status=$?; unmount_all; ((status == 0)) || rm -rf --one-file-system "$rootfs"' EXIT

echo "== [${SECONDS} s] debootstrap --variant=minbase bookworm (http://deb.debian.org/debian)"
debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian
unmount_all
# For the build only: name resolution (ch-run binds the host's at run time), and the host's
# CA bundle and proxies for pip (a site's TLS-intercepting proxy has its own CA).
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
build_env=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
if [[ -f $ca ]]; then
  cp "$ca" "$rootfs/orch-build-ca.crt"
  build_env+=(PIP_CERT=/orch-build-ca.crt)
fi
for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -z ${!var:-} ]] || build_env+=("$var=${!var}")
done
mkdir -p "$rootfs/opt/orch-wheels"
cp "$wheels"/torch-2.13.0+cpu-*.whl "$rootfs/opt/orch-wheels/"

echo "== [${SECONDS} s] install steps (chroot)"
cat >"$rootfs/orch-install.sh" <<'ORCH_INSTALL'
# --- Inside the image, as root: the same steps in Apptainer's %post and Charliecloud's chroot.
export DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1
echo "-- apt-get install python3 python3-venv ca-certificates"
apt-get update -q
apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates
apt-get clean
rm -rf /var/lib/apt/lists/*
# Python packages go into a venv: Debian's own python3 refuses pip installs (PEP 668).
echo "-- venv /opt/venv, pip install"
python3 -m venv /opt/venv
# From the local wheel directory only (--no-index --no-deps): never from a package index.
/opt/venv/bin/python -m pip install --no-cache-dir --no-index --no-deps --find-links /opt/orch-wheels \
  torch==2.13.0+cpu
rm -rf /opt/orch-wheels
# From the package index, every version pinned.
/opt/venv/bin/python -m pip install --no-cache-dir \
  numpy==2.4.6 filelock==4.2.11 typing-extensions==4.16.0 setuptools==84.2.1 sympy==1.14.0 \
  mpmath==1.3.0 networkx==3.6.1 jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0
/opt/venv/bin/python -m pip check
# Empty mount points for bind mounts (Charliecloud binds only onto directories that exist).
mkdir -p /work /scratch /project /data /gpfs /lustre
# Which image this is, readable inside the container (orch records it in every rank's header).
printf '%s\n' '{"apt":["python3","python3-venv","ca-certificates"],"base":"debian bookworm (minbase)","framework":"torch","name":"torch","pip":["torch==2.13.0+cpu","numpy==2.4.6","filelock==4.2.11","typing-extensions==4.16.0","setuptools==84.2.1","sympy==1.14.0","mpmath==1.3.0","networkx==3.6.1","jinja2==3.1.6","markupsafe==3.0.4","fsspec==2026.9.0"],"spec_sha256":"c8d5a910f8658feb57facdd968eebad9667958d0694b1bc4dcd73f82c71159e5"}' >/etc/orch-image.json
ORCH_INSTALL
chroot "$rootfs" /usr/bin/env -i "${build_env[@]}" /bin/bash -euo pipefail /orch-install.sh </dev/null
rm -f "$rootfs/orch-install.sh" "$rootfs/orch-build-ca.crt"

# The image's environment, for `ch-run --set-env` (Charliecloud reads /ch/environment).
mkdir -p "$rootfs/ch"
cat >"$rootfs/ch/environment" <<'ORCH_ENV'
PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LANG=C.UTF-8
OMP_NUM_THREADS=1
ORCH_ENV
# ch-run binds the host's /dev: the build's device nodes are not part of the image.
unmount_all
find "$rootfs/dev" -xdev -mindepth 1 -delete
# ch-run binds the host's name resolution files only where the image has them: without an
# /etc/hosts (minbase has none) ranks cannot resolve the nodes' names (MASTER_ADDR).
for f in etc/hosts etc/resolv.conf etc/machine-id; do
  rm -f "${rootfs:?}/$f"
  : >"$rootfs/$f"
done
mv "$rootfs" "$image"
echo "== [${SECONDS} s] $image"
