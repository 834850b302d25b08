"""Image digests: ``sha256:<hex>`` of an image file or directory, cached by what changes with
the image (a file's size and mtime, the mtimes of a tree's directories)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

from .. import files


def cache_dir() -> Path:
    """orch's cache (~/.cache/orch): built images, image digests."""
    return Path(os.environ.get("ORCH_CACHE_DIR") or Path.home() / ".cache" / "orch")


def _walk(root: Path):
    """(relative path, lstat) of every entry below root, sorted, symlinks not followed."""
    stack = [root]
    entries = []
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                entries.append((os.path.relpath(e.path, root), st))
                if stat.S_ISDIR(st.st_mode):
                    stack.append(Path(e.path))
    entries.sort(key=lambda x: x[0])
    return entries


def _file_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _tree_digest(root: Path, entries) -> str:
    """A directory image's digest: sha256 of its sorted listing (path, type, mode, and the
    content hash of a file, the target of a link). Device nodes are listed, never read."""
    h = hashlib.sha256()
    for rel, st in entries:
        mode = st.st_mode
        if stat.S_ISREG(mode):
            what = "f " + _file_sha256(root / rel)
        elif stat.S_ISLNK(mode):
            what = "l " + os.readlink(root / rel)
        elif stat.S_ISDIR(mode):
            what = "d"
        else:
            what = f"s {st.st_rdev}"
        h.update(f"{rel}\0{stat.S_IMODE(mode):o}\0{what}\n".encode())
    return h.hexdigest()


def _dirs_key(root: Path) -> str:
    """Hash of every directory's mtime below root: files added, removed or replaced (what
    installing into an image does) change it. Reads no file and stats directories only."""
    h = hashlib.sha256()
    stack = [str(root)]
    while stack:
        d = stack.pop()
        h.update(f"{os.path.relpath(d, root)}\0{os.stat(d).st_mtime_ns}\n".encode())
        with os.scandir(d) as it:
            stack += sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
    return h.hexdigest()


def image_digest(path: Path) -> str:
    """``sha256:<hex>`` of an image file (.sif, .sqfs) or directory, computed once per image
    version and cached in ~/.cache/orch/image-digests.json: keyed by a file's size and mtime,
    a directory's by the mtimes of its directories (0.3 s for 3,000 directories, against
    10 s to hash the 1.2 GB torch image)."""
    path = path.resolve()
    st = path.stat()
    key = _dirs_key(path) if path.is_dir() else f"{st.st_size}:{st.st_mtime_ns}"
    cache_file = cache_dir() / "image-digests.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(str(path))
    if isinstance(hit, dict) and hit.get("key") == key:
        return hit["digest"]
    digest = "sha256:" + (_tree_digest(path, _walk(path)) if path.is_dir()
                          else _file_sha256(path))
    cache[str(path)] = {"key": key, "digest": digest, "at": time.time()}
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        files.write_text_atomic(cache_file, json.dumps(cache, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only home: the digest is still right, just computed again next time
    return digest
