#!/bin/bash
# Charliecloud image 'tensorflow': TensorFlow 2.21.0 (CPU) with Keras 3.15 on Debian 12 with Python 3.11.
# GENERATED from containers/specs/tensorflow.yaml by `orch container generate`: edit the spec,
# not this file (tests/test_containers.py fails when the two disagree).
#
# A directory image built without any registry: debootstrap a minimal Debian, then run the
# same install steps as containers/tensorflow.def's %post inside it with chroot. Needs root.
#   orch container build tensorflow --runtime charliecloud [--squash]   (cached by content)
#   bash containers/tensorflow.charliecloud.sh IMAGE_DIR [WHEEL_DIR]    (by hand)
# Then: ch-run --unset-env='*' --set-env IMAGE_DIR -- python3 ...
set -euo pipefail

image=${1:?usage: $0 IMAGE_DIR [WHEEL_DIR]}
die() { echo "tensorflow.charliecloud.sh: $*" >&2; exit 1; }
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
echo "-- apt-get install python3 python3-venv ca-certificates"
apt-get update -q
apt-get install -y -q --no-install-recommends python3 python3-venv ca-certificates
apt-get clean
rm -rf /var/lib/apt/lists/*
# Python packages go into a venv: Debian's own python3 refuses pip installs (PEP 668).
echo "-- venv /opt/venv, pip install"
python3 -m venv /opt/venv
# From the package index, every version pinned.
/opt/venv/bin/python -m pip install --no-cache-dir \
  tensorflow-cpu==2.21.0 numpy==2.4.6 keras==3.15.1 absl-py==2.5.1 astunparse==1.6.3 \
  certifi==2026.10.18 charset-normalizer==3.5.2 flatbuffers==25.12.19 gast==0.7.0 \
  google-pasta==0.2.0 grpcio==1.85.1 h5py==3.14.0 idna==3.20 libclang==18.1.1 \
  markdown-it-py==4.3.0 mdurl==0.1.2 ml-dtypes==0.6.0 namex==0.1.0 opt-einsum==3.4.0 \
  optree==0.20.0 packaging==26.3 protobuf==7.36.2 pygments==2.21.0 requests==2.34.2 \
  rich==15.0.0 six==1.17.0 termcolor==3.3.0 typing-extensions==4.16.0 urllib3==2.8.0 \
  wrapt==2.5.2
/opt/venv/bin/python -m pip check
# Empty mount points for bind mounts (Charliecloud binds only onto directories that exist).
mkdir -p /work /scratch /project /data /gpfs /lustre
# Which image this is, readable inside the container (orch records it in every rank's header).
printf '%s\n' '{"apt":["python3","python3-venv","ca-certificates"],"base":"debian bookworm (minbase)","framework":"tensorflow","name":"tensorflow","pip":["tensorflow-cpu==2.21.0","numpy==2.4.6","keras==3.15.1","absl-py==2.5.1","astunparse==1.6.3","certifi==2026.10.18","charset-normalizer==3.5.2","flatbuffers==25.12.19","gast==0.7.0","google-pasta==0.2.0","grpcio==1.85.1","h5py==3.14.0","idna==3.20","libclang==18.1.1","markdown-it-py==4.3.0","mdurl==0.1.2","ml-dtypes==0.6.0","namex==0.1.0","opt-einsum==3.4.0","optree==0.20.0","packaging==26.3","protobuf==7.36.2","pygments==2.21.0","requests==2.34.2","rich==15.0.0","six==1.17.0","termcolor==3.3.0","typing-extensions==4.16.0","urllib3==2.8.0","wrapt==2.5.2"],"spec_sha256":"664bca9f7632f1d76c042b4266adb71ccd7a34731a40e27273e6fdd4137c3daf"}' >/etc/orch-image.json
ORCH_INSTALL
chroot "$rootfs" /usr/bin/env -i "${build_env[@]}" /bin/bash -euo pipefail /orch-install.sh </dev/null
rm -f "$rootfs/orch-install.sh" "$rootfs/orch-build-ca.crt"

# The image's environment, for `ch-run --set-env` (Charliecloud reads /ch/environment).
mkdir -p "$rootfs/ch"
cat >"$rootfs/ch/environment" <<'ORCH_ENV'
PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LANG=C.UTF-8
TF_CPP_MIN_LOG_LEVEL=1
TF_NUM_INTEROP_THREADS=2
TF_NUM_INTRAOP_THREADS=1
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
