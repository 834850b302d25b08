"""Reading a SIF file (Singularity Image Format, the file Apptainer and Singularity run): its
header, its descriptor table and its data objects, as the SIF reference implementation
(github.com/sylabs/sif, ``siftool``) lays them out, format version 01.

A SIF file is a 128-byte header, a table of fixed-size descriptors, then the data objects each
descriptor points at: the root filesystem (a SquashFS partition; Apptainer mounts only the
*primary* system partition), the definition file, JSON labels. Reading it needs no tool, so a
run's provenance can say what is in an image on any machine; ``siftool`` builds it
(:mod:`orchestrator.images.sifbuild`) and the tests check this reader against it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pydantic import BaseModel

from ..errors import UserError

MAGIC = b"SIF_MAGIC\0"
# Header: launch script[32], magic[10], version[3], arch[3], id[16], then 8 int64: created,
# modified, descriptors free/total/offset/size, data offset/size (little-endian, packed).
_HEADER = struct.Struct("<32s10s3s3s16s8q")
# Descriptor: data type int32, used bool, id/group/link uint32, offset, size, size with
# padding, created, modified, uid, gid (int64), name[128], extra[384]: 585 bytes.
_DESCRIPTOR = struct.Struct("<i?III7q128s384s")
MAX_LABELS_BYTES = 1 << 20  # labels are a few KB; a bigger object is not read whole
_GROUP_MASK = 0xF0000000  # a group id is stored with this bit set; 0: no group

DATA_TYPES = {0x4001: "Def.FILE", 0x4002: "Env.Vars", 0x4003: "JSON.Labels", 0x4004: "FS",
              0x4005: "Signature", 0x4006: "JSON.Generic", 0x4007: "Generic/Raw",
              0x4008: "Cryptographic Message", 0x4009: "SBOM"}
FS_TYPES = {1: "Squashfs", 2: "Ext3", 3: "Archive", 4: "Raw", 5: "Encrypted squashfs"}
PART_TYPES = {1: "System", 2: "PrimSys", 3: "Data", 4: "Overlay"}
# siftool's --partarch numbers, which the file stores as two digits; keyed by machine names
# as Python's platform.machine() gives them.
ARCHS = {"i386": 1, "x86_64": 2, "arm": 3, "aarch64": 4, "ppc64": 5, "ppc64le": 6,
         "mips": 7, "mipsle": 8, "mips64": 9, "mips64le": 10, "s390x": 11, "riscv64": 12}
ARCH_NAMES = {1: "386", 2: "amd64", 3: "arm", 4: "arm64", 5: "ppc64", 6: "ppc64le", 7: "mips",
              8: "mipsle", 9: "mips64", 10: "mips64le", 11: "s390x", 12: "riscv64"}


class Descriptor(BaseModel):
    """One data object of a SIF file, as siftool ``info`` shows it."""

    id: int
    type: str  # DATA_TYPES' names, as siftool prints them
    group: int | None
    link: int | None
    offset: int
    size: int
    name: str
    fs: str | None = None  # a partition's filesystem, type and architecture
    partition: str | None = None
    arch: str | None = None

    def record(self) -> dict:
        """What does not depend on the content's size: the golden record's row."""
        return self.model_dump(exclude={"offset", "size"})


def is_sif(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(42)[32:] == MAGIC
    except OSError:
        return False


def header(path: Path) -> dict:
    """The global header: format version, primary architecture, descriptor counts."""
    with open(path, "rb") as fh:
        raw = fh.read(_HEADER.size)
    if len(raw) < _HEADER.size or raw[32:42] != MAGIC:
        raise UserError(f"{path}: not a SIF file (no SIF_MAGIC at byte 32)")
    f = _HEADER.unpack(raw)
    return {"version": _cstr(f[2]), "arch": ARCH_NAMES.get(_num(f[3]), "unknown"),
            "descriptors_free": f[7], "descriptors_total": f[8],
            "descriptors_offset": f[9], "descriptors_size": f[10]}


def descriptors(path: Path) -> list[Descriptor]:
    """The used descriptors, in id order."""
    h = header(path)
    with open(path, "rb") as fh:
        fh.seek(h["descriptors_offset"])
        table = fh.read(h["descriptors_total"] * _DESCRIPTOR.size)
    if len(table) < h["descriptors_total"] * _DESCRIPTOR.size:
        raise UserError(f"{path}: a truncated SIF file (its descriptor table ends early); "
                        f"build or copy it again")
    out = []
    for i in range(len(table) // _DESCRIPTOR.size):
        d = _DESCRIPTOR.unpack_from(table, i * _DESCRIPTOR.size)
        if d[1]:
            out.append(_descriptor(d))
    return sorted(out, key=lambda d: d.id)


def _descriptor(d: tuple) -> Descriptor:
    dtype, _used, did, group, link, offset, size, *_times, name, extra = d
    desc = Descriptor(id=did, type=DATA_TYPES.get(dtype, f"0x{dtype:x}"),
                      group=(group & ~_GROUP_MASK) or None, link=link or None, offset=offset,
                      size=size, name=_cstr(name))
    if dtype == 0x4004:  # a partition: filesystem int32, partition type int32, arch[3]
        fs, part, arch = struct.unpack_from("<ii3s", extra)
        desc = desc.model_copy(update={
            "fs": FS_TYPES.get(fs, str(fs)), "partition": PART_TYPES.get(part, str(part)),
            "arch": ARCH_NAMES.get(_num(arch), "unknown")})
    return desc


def read_object(path: Path, desc: Descriptor) -> bytes:
    """A (small) data object's bytes: labels, a definition file."""
    with open(path, "rb") as fh:
        fh.seek(desc.offset)
        return fh.read(desc.size)


def labels(path: Path) -> dict[str, str]:
    """The first JSON.Labels object's labels ({} where there is none or it is not JSON)."""
    for d in descriptors(path):
        if d.type == "JSON.Labels" and d.size <= MAX_LABELS_BYTES:
            try:
                data = json.loads(read_object(path, d))
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    return {}


def built_with(path: Path) -> str:
    """How a SIF was built: 'siftool' (orch assembled it: its org.orch.built-with label) or
    'apptainer build' (Apptainer and Singularity label their images, not with orch's labels)."""
    return labels(path).get("org.orch.built-with") or "apptainer build"


def marker(path: Path) -> dict | None:
    """The image's /etc/orch-image.json as orch labelled it (None: not an orch-built SIF)."""
    try:
        data = json.loads(labels(path).get("org.orch.marker", ""))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def primary_partition(path: Path) -> Descriptor | None:
    return next((d for d in descriptors(path) if d.partition == "PrimSys"), None)


def _cstr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def _num(b: bytes) -> int:
    try:
        return int(_cstr(b))
    except ValueError:
        return 0
