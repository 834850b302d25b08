#!/bin/bash
# Charliecloud image 'mxnet': MXNet 1.9.1 (CPU) with numpy 1.23.5 on Debian 12 with Python 3.11.
# GENERATED from containers/specs/mxnet.yaml by `orch container generate`: edit the spec,
# not this file (tests/test_containers.py fails when the two disagree).
#
# A directory image built without any registry: debootstrap a minimal Debian, then run the
# same install steps as containers/mxnet.def's %post inside it with chroot. Needs root.
#   orch container build mxnet --runtime charliecloud [--squash]   (cached by content)
#   bash containers/mxnet.charliecloud.sh IMAGE_DIR [WHEEL_DIR]    (by hand)
# Then: ch-run --unset-env='*' --set-env IMAGE_DIR -- python3 ...
set -euo pipefail

image=${1:?usage: $0 IMAGE_DIR [WHEEL_DIR]}
die() { echo "mxnet.charliecloud.sh: $*" >&2; exit 1; }
((EUID == 0)) || die "debootstrap and chroot need root"
command -v debootstrap >/dev/null || die "debootstrap is not installed: apt-get install -y --no-install-recommends debootstrap"
[[ ! -e $image ]] || die "$image exists: remove it first"
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

echo "== [${SECONDS} s] install steps (chroot)"
cat >"$rootfs/orch-install.sh" <<'ORCH_INSTALL'
# --- Inside the image, as root: the same steps in Apptainer's %post and Charliecloud's chroot.
export DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1
echo "-- apt-get install python3 python3-venv ca-certificates libgomp1 libquadmath0"
apt-get update -q
apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates libgomp1 libquadmath0
apt-get clean
rm -rf /var/lib/apt/lists/*
# Python packages go into a venv: Debian's own python3 refuses pip installs (PEP 668).
echo "-- venv /opt/venv, pip install"
python3 -m venv /opt/venv
# From the package index, every version pinned.
/opt/venv/bin/python -m pip install --no-cache-dir \
  mxnet==1.9.1 numpy==1.23.5 graphviz==0.8.4 requests==2.34.2 certifi==2026.10.18 \
  charset-normalizer==3.5.2 idna==3.20 urllib3==2.8.0
/opt/venv/bin/python -m pip check
# Empty mount points for bind mounts (Charliecloud binds only onto directories that exist).
mkdir -p /work /scratch /project /data /gpfs /lustre
# Which image this is, readable inside the container (orch records it in every rank's header).
printf '%s\n' '{"apt":["python3","python3-venv","ca-certificates","libgomp1","libquadmath0"],"base":"debian bookworm (minbase)","framework":"mxnet","name":"mxnet","pip":["mxnet==1.9.1","numpy==1.23.5","graphviz==0.8.4","requests==2.34.2","certifi==2026.10.18","charset-normalizer==3.5.2","idna==3.20","urllib3==2.8.0"],"spec_sha256":"60e2dbb7882209e65bcf8a2c67c95cb1c518ca892cb77f8c2f3d587805023824"}' >/etc/orch-image.json
ORCH_INSTALL
chroot "$rootfs" /usr/bin/env -i "${build_env[@]}" /bin/bash -euo pipefail /orch-install.sh </dev/null
rm -f "$rootfs/orch-install.sh" "$rootfs/orch-build-ca.crt"

# The image's environment, for `ch-run --set-env` (Charliecloud reads /ch/environment).
mkdir -p "$rootfs/ch"
cat >"$rootfs/ch/environment" <<'ORCH_ENV'
PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LANG=C.UTF-8
MXNET_CPU_WORKER_NTHREADS=1
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
