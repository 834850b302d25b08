#!/usr/bin/env bash
# Give CNTK 2.7 the Open MPI 1.10 sonames it was linked against, inside the venv.
#
# Run by `orch env build cntk` as a build step, with VENV set (the venv directory).
# CNTK 2.7's wheel needs libmpi.so.12 and libmpi_cxx.so.1 (Open MPI 1.10); Debian 12 only has
# Open MPI 4.1 (libmpi.so.40, libmpi_cxx.so.40), which provides every symbol CNTK uses. This
# creates $VENV/lib/mpi-shim/{libmpi.so.12,libmpi_cxx.so.1} -> the system's .so.40 files;
# the cntk mode's launch.sh puts that directory first on LD_LIBRARY_PATH for each rank.
# Nothing outside the venv is touched.
set -euo pipefail
: "${VENV:?set by orch env build (the venv directory)}"

die() { printf 'cntk-mpi-shim: ERROR: %s\n' "$*" >&2; exit 1; }

libdir=${ORCH_MPI_LIBDIR:-/usr/lib/x86_64-linux-gnu}
shim=$VENV/lib/mpi-shim
mkdir -p "$shim"
for pair in libmpi.so.12:libmpi.so.40 libmpi_cxx.so.1:libmpi_cxx.so.40; do
  name=${pair%%:*} target=$libdir/${pair#*:}
  [[ -e $target ]] || die "$target is missing: CNTK needs Open MPI 4's libraries; install" \
    "openmpi-bin/libopenmpi-dev ('apt-get install -y openmpi-bin libopenmpi-dev') or run" \
    "'scripts/testcluster up' (root), then 'orch env build cntk' again."
  ln -sfn "$target" "$shim/$name"
done
# Prove it: the wheel's core library resolves every MPI soname through the shim.
# (With CNTK's import-time library checks skipped, as orchestrator/rankside/cntk/models.py
# does: they run ldconfig, which as root adds soname links to the shim directory.)
LD_LIBRARY_PATH="$shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$VENV/bin/python" -c '
import sys, types
stub = types.ModuleType("cntk.cntk_py_init")
stub.cntk_check_distro_info = stub.cntk_check_libs = lambda: None
sys.modules["cntk.cntk_py_init"] = stub
import cntk' \
  || die "cntk does not import even with the shim ($shim) on LD_LIBRARY_PATH"
echo "cntk-mpi-shim: $shim -> $(readlink "$shim/libmpi.so.12"), $(readlink "$shim/libmpi_cxx.so.1")"
