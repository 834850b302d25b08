#!/usr/bin/env bash
# Build Horovod 0.28.1 (PyTorch + MPI + Gloo) into an orch environment's venv.
#
# Run by `orch env build` as a build step, after the environment's pip packages (torch, numpy,
# mpi4py, cmake and Horovod's own build requirements) are installed, with:
#   VENV    the venv directory         PYTHON  its python
#   PIP     "$PYTHON -m pip install --quiet ..." (an *install* command line)
#
# Horovod 0.28.1 (its last release, 2023) does not build as published against PyTorch 2.13:
#   1. cmake >= 4 refuses gloo's `cmake_minimum_required(VERSION < 3.5)`
#      -> CMAKE_POLICY_VERSION_MINIMUM=3.5 (harmless with cmake 3.x);
#   2. PyTorch 2.13's headers require C++17 but Horovod forces CMAKE_CXX_STANDARD 14 in
#      CMakeLists.txt and horovod/torch/CMakeLists.txt (CXXFLAGS cannot override it)
#      -> patch both to 17 in the unpacked sdist.
# It is built with --no-build-isolation so that it compiles against the torch already in the
# venv (an isolated build would fetch a different torch, and the CUDA one at that).
set -euo pipefail

readonly VERSION=0.28.1
: "${VENV:?set by orch env build}" "${PYTHON:?set by orch env build}" "${PIP:?set by orch env build}"

die() { printf 'build-horovod: ERROR: %s\n' "$*" >&2; exit 1; }

# --- Open MPI's compiler wrapper and headers: Horovod's MPI controller links against them.
if ! command -v mpicc >/dev/null 2>&1 || ! mpicc --showme:compile >/dev/null 2>&1; then
  die "mpicc not found: Horovod's MPI support needs Open MPI's development files. As root run" \
      "'scripts/testcluster up' (it installs openmpi-bin libopenmpi-dev) or" \
      "'apt-get install -y openmpi-bin libopenmpi-dev', then 'orch env build torch-mpi' again."
fi
mpi_h_found=0
for dir in $(mpicc --showme:incdirs); do [[ -f $dir/mpi.h ]] && mpi_h_found=1; done
((mpi_h_found)) || die "mpicc is there but mpi.h is not (in $(mpicc --showme:incdirs)):" \
  "install libopenmpi-dev ('apt-get install -y libopenmpi-dev' or 'scripts/testcluster up')."
"$PYTHON" -c 'import torch' 2>/dev/null || die "torch is not installed in $VENV: list" \
  "torch==2.13.0 in the environment's packages (Horovod builds against it)."

# --- The sdist, unpacked in a scratch directory that is removed however this ends.
work=$(mktemp -d "${TMPDIR:-/tmp}/orch-horovod.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "build-horovod: downloading the horovod==$VERSION sdist"
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  --dest "$work" "horovod==$VERSION"
tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
src=$work/horovod-$VERSION

# --- Fix 2: C++17 wherever Horovod pins C++14 (fail if the pattern moved: better than a
# silently unpatched build that fails 3 minutes later with a cryptic #error).
for f in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
  grep -q 'CMAKE_CXX_STANDARD 14' "$f" || die "$f no longer sets CMAKE_CXX_STANDARD 14: check the patch"
  sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$f"
done

# --- Build and install. The venv's bin first on PATH: its cmake, and its python for CMake.
echo "build-horovod: building (several minutes: Horovod's C++ core, Gloo and the torch ops)"
export PATH="$VENV/bin:$PATH"
export CMAKE_POLICY_VERSION_MINIMUM=3.5   # fix 1
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
# Horovod's setup.py runs make -j8 unless MAKEFLAGS is set: one job per core instead.
export MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}"
# --no-deps: its requirements (cloudpickle, psutil, pyyaml, packaging) are pinned in the
# environment's packages. $PIP is a command line, hence unquoted.
# shellcheck disable=SC2086
$PIP --no-build-isolation --no-deps --no-cache-dir "$src"

# --- What was built: fail here, not in the first job, if a controller is missing.
check=$("$VENV/bin/horovodrun" --check-build)
echo "$check"
for want in "PyTorch" "MPI" "Gloo"; do
  grep -Eq "\[X\] $want\b" <<<"$check" || die "Horovod was built without $want"
done
