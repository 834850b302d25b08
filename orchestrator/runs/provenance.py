"""Provenance beside every run (``<run_dir>/provenance.json``) and re-running a run from it.

Written when a run is prepared, before it is submitted: what a result was produced with.

    orch         version, git commit of the checkout (None when installed), dirty or not
    site         name, the sha256 of its validated config, the file it was read from (found
                 on the site search path or given), and the config itself
    environment  the framework's environment (python, modules, variables, container)
    container    runtime, image path, image digest, the spec the image was built from
    scripts      sha256 of each rendered file, and of all of them with the run directory
                 replaced by a placeholder (equal for a run and its reruns)
    env          the variables job.sbatch sets (transport + environment)
    lib_dir      the staged rank-side code the ranks import (content-addressed)
    study        the study file that planned the run (name, file, sha256, content), or None

The rank logs complete it: each header has the rank's environment and container facts, each
footer the framework and library versions (``orch show`` prints them together).

``orch rerun RUN_ID`` re-submits a run from its record alone: the same Run (run.json), site
config (from provenance.json, not today's YAML), rank-side code, image (its digest must
match) and rendered scripts, copied into a new sweep directory with only the run-directory
paths rewritten. By default that is ``<sweep>/reruns/<n>/<run_id>/``: beside the original,
never over it, and a sweep directory of its own, so both result sets merge (``orch gather``)
without two rows of the same run id in one table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from .. import __version__, protocol
from ..containers import runtime
from ..errors import UserError
from ..images import checks
from ..images.image import ImageFacts, ImageTree
from ..plan.resolved import ResolvedRun
from ..render import Rendered, transport_env
from ..resources import package_dir
from ..site import Site
from . import rundir
from .rundir import JobRecord, Prepared

SCHEMA = 1
FILE = protocol.PROVENANCE_FILE
SCRIPTS = ("job.sbatch", "launch.sh")
RUN_DIR_PLACEHOLDER = "@RUN_DIR@"


@functools.lru_cache(maxsize=1)
def orch_source() -> dict:
    """orch's version and, for a git checkout, its commit (at submit time) and dirtiness."""
    root = package_dir().parent
    out = {"version": __version__, "git_commit": None, "git_dirty": None, "checkout": None}
    if not (root / ".git").exists():
        return out
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        if head.returncode == 0:
            out["git_commit"] = head.stdout.strip()
            out["checkout"] = str(root)
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                    "--untracked-files=no"], capture_output=True, text=True,
                                   timeout=30)
            out["git_dirty"] = bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def site_hash(site: Site) -> str:
    """sha256 of the validated site config (defaults filled in, key order fixed)."""
    return hashlib.sha256(json.dumps(site.model_dump(mode="json"), sort_keys=True)
                          .encode()).hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def script_digests(files: dict[str, str], run_dir: str) -> dict:
    """sha256 of each file, and one over all with the run directory replaced."""
    norm = hashlib.sha256()
    for name in sorted(files):
        norm.update(name.encode() + b"\0" + files[name].replace(run_dir, RUN_DIR_PLACEHOLDER)
                    .encode() + b"\0")
    return {"files": {name: _sha(text) for name, text in sorted(files.items())},
            "normalized": norm.hexdigest()}


def rendered_files(rendered: Rendered) -> dict[str, str]:
    return {"job.sbatch": rendered.job_script, "launch.sh": rendered.launch_script,
            **dict(rendered.files)}


def build(resolved: ResolvedRun, rdir: Path, lib: Path, files: dict[str, str],
          image: ImageFacts | None, rerun_of: dict | None = None,
          study: dict | None = None) -> dict:
    run, site, env = resolved.run, resolved.site, resolved.environment
    rdir = rdir.resolve()
    return {
        "schema": SCHEMA,
        "run_id": run.run_id,
        "run_dir": str(rdir),
        "prepared_at": time.time(),
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "orch": orch_source(),
        "site": {"name": site.name, "sha256": site_hash(site), "file": site.source_file,
                 "config": site.model_dump(mode="json")},
        "environment": {"framework": run.framework, **env.model_dump(mode="json")},
        "container": image.as_dict() if image else None,
        "scripts": script_digests(files, str(rdir)),
        "env": dict([*transport_env(resolved.partition), *sorted(env.env.items())]),
        "lib_dir": str(lib),
        "rerun_of": rerun_of,
        "study": study,
        # A user's own model: the file the ranks import and its sha256 when it was checked.
        "model": {"name": run.model, "sha256": run.model_sha256,
                  "file": run.model.rpartition(":")[0] if run.model_sha256 else None,
                  "params": run.model_params, "flops_per_sample": run.model_flops}
        if ":" in run.model else None,
    }


def write(rdir: Path, data: dict) -> None:
    rundir.write_json_atomic(rdir / FILE, data)


def read(rdir: Path) -> dict | None:
    path = rdir / FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        raise UserError(f"{path}: damaged provenance record (not JSON); the run's scripts "
                        f"and rank logs are intact: move it aside to gather the rest") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: damaged provenance record (not a JSON object)")
    return data


# --- orch show -----------------------------------------------------------------------------


def rank_facts(rdir: Path) -> list[dict]:
    """Per rank: host, container facts (header) and versions (footer), from its log."""
    out = []
    for task, path in protocol.rank_logs(rdir / protocol.RANKS_DIR):
        log = protocol.read_rank_log(path)
        header, footer = log.header, log.footer
        out.append({"rank": task,
                    "host": (header or {}).get("host"),
                    "container": (header or {}).get("container"),
                    "env": (header or {}).get("env"),
                    "script_digest": (header or {}).get("script_digest"),
                    "status": (footer or {}).get("status"),
                    "versions": (footer or {}).get("versions")})
    return out


def show(rdir: Path) -> dict:
    """provenance.json + ledger state + what the ranks recorded."""
    prov = read(rdir)
    if prov is None:
        raise UserError(f"{rdir} has no {FILE} (prepared by an orch without provenance)")
    record = rundir.read_record(rdir)
    return {"provenance": prov, "state": record.state if record else None,
            "job_id": record.job_id if record else None, "ranks": rank_facts(rdir)}


def format_show(info: dict) -> str:
    """Readable summary of :func:`show`."""
    p = info["provenance"]
    o = p["orch"]
    lines = [
        f"run          {p['run_id']}",
        f"run dir      {p['run_dir']}",
        f"state        {info['state']}" + (f" (job {info['job_id']})" if info["job_id"] else ""),
        f"orch         {o['version']}  commit {o['git_commit'] or '-'}"
        + (" (uncommitted changes)" if o.get("git_dirty") else ""),
        f"site         {p['site']['name']}  config sha256 {p['site']['sha256']}"
        + (f"  from {p['site']['file']}" if p["site"].get("file") else ""),
        f"environment  {p['environment']['framework']}",
    ]
    c = p.get("container")
    if c:
        lines += [f"container    {c['runtime']}  {c['image']}",
                  f"image digest {c['digest']}"
                  + (f"  built with {c['built_with']}" if c.get("built_with") else "")]
        if c.get("spec"):
            s = c["spec"]
            lines.append(f"image spec   {s.get('name')}  sha256 {s.get('spec_sha256')}")
            lines.append(f"  packages   {' '.join(s.get('pip') or [])}")
    else:
        lines.append("container    none (ranks run the environment's python on the nodes)")
    lines.append(f"scripts      {p['scripts']['normalized']} (run dir normalized)")
    for name, sha in p["scripts"]["files"].items():
        lines.append(f"  {name:<16} sha256 {sha}")
    lines.append(f"rank code    {p['lib_dir']}")
    if p.get("rerun_of"):
        lines.append(f"rerun of     {p['rerun_of']['run_dir']}")
    if p.get("study"):
        lines.append(f"study        {p['study']['name']}  {p['study']['file']}  sha256 "
                     f"{p['study']['sha256']}")
    lines.append("env          " + " ".join(f"{k}={v}" for k, v in sorted(p["env"].items())))
    ranks = info["ranks"]
    if ranks:
        versions = next((r["versions"] for r in ranks if r.get("versions")), None)
        if versions:
            lines.append("versions     " + " ".join(f"{k} {v}" for k, v in
                                                    sorted(versions.items())))
        inside = [r for r in ranks if (r.get("container") or {}).get("image")]
        lines.append(f"ranks        {len(ranks)} logged, {len(inside)} inside the image")
        for r in ranks:
            cont = r.get("container") or {}
            where = (f"in {cont.get('runtime') or 'container'} image "
                     f"{(cont.get('image') or {}).get('name', '?')} digest "
                     f"{cont.get('digest', '?')}" if cont.get("image") else "on the host")
            lines.append(f"  rank {r['rank']:<3} {r['host'] or '?':<10} {r['status'] or '-':<6} "
                         f"{where}")
    else:
        lines.append("ranks        none logged yet")
    return "\n".join(lines) + "\n"


# --- orch rerun ----------------------------------------------------------------------------


def next_rerun_dir(sweep: Path) -> Path:
    base = sweep / "reruns"
    n = 1
    while (base / str(n)).exists():
        n += 1
    return base / str(n)


def prepare_rerun(src: Path, out: Path | None = None):
    """Copy a finished run into a new sweep directory, ready to submit.

    Returns (Prepared, Site). Raises UserError, before anything is written, if the record is
    incomplete, the staged rank-side code is gone, or the image changed since the run.
    """
    src = src.resolve()
    prov = read(src)
    if prov is None:
        raise UserError(f"{src} has no {FILE}: it was prepared before orch recorded "
                        f"provenance, so it cannot be re-run from its record")
    run = rundir.read_run(src)
    site = Site.model_validate(prov["site"]["config"])
    files = {name: (src / name).read_text() for name in (*SCRIPTS, *_extra_names(prov))}
    digests = script_digests(files, str(src))
    if digests["normalized"] != prov["scripts"]["normalized"]:
        raise UserError(f"{src}: its scripts changed since the run was prepared (digest "
                        f"mismatch with {FILE}); re-run it with 'orch sweep' instead")
    lib = Path(prov["lib_dir"])
    if not lib.is_dir():
        raise UserError(f"the rank-side code the run imported ({lib}) is gone: it cannot be "
                        f"re-run as it was")
    image = None
    if prov.get("container"):
        c = prov["container"]
        facts = checks.check(site, [run], src.parent, lib)  # exists, runtime, binds
        image = facts.get(run.framework)
        if image is None or image.digest != c["digest"]:
            raise UserError(f"the image {c['image']} changed since the run (digest "
                            f"{image.digest if image else '-'}, recorded {c['digest']}): "
                            f"restore it to re-run the run as it was")
    sweep = (out.resolve() if out else next_rerun_dir(src.parent.resolve()))
    new = sweep / src.name
    if new.exists():
        raise UserError(f"{new} exists: a rerun never writes over a run; choose another --out")
    if image and runtime(image.runtime).binds_need_targets:
        runtime(image.runtime).binds([str(new), str(lib)],
                                     list(site.environment(run.framework).container.binds),
                                     ImageTree(Path(image.image)))
        if not _covered(new, files.get("container-python", "")):
            raise UserError(f"the copied container wrapper cannot see {new} (it binds the "
                            f"paths of the original run): rerun into the original sweep "
                            f"directory's reruns/ (no --out) or under /tmp")
    copied = {name: text.replace(str(src), str(new)) for name, text in files.items()}
    rerun_of = {"run_dir": str(src), "provenance_sha256":
                hashlib.sha256((src / FILE).read_bytes()).hexdigest()}
    data = build(ResolvedRun.of(run, site), new, lib, copied, image, rerun_of=rerun_of,
                 study=prov.get("study"))
    data["site"]["file"] = prov["site"].get("file")
    record = JobRecord(run_id=run.run_id, attempt=1, scheduler=site.scheduler)
    new.mkdir(parents=True)
    rundir.materialise(new, run, copied, data, record)
    return Prepared(run, new, record, "submit"), site


def _extra_names(prov: dict) -> list[str]:
    return [n for n in prov["scripts"]["files"] if n not in SCRIPTS]


def _covered(new: Path, wrapper: str) -> bool:
    """Is the new run directory visible through the Charliecloud wrapper's binds?"""
    if not wrapper:
        return True
    p = str(new)
    dsts = ["/tmp"] + [b.strip("'").split(":")[-1]
                       for b in re.findall(r"^\s*-b (\S+)$", wrapper, re.M)]
    return any(p == d or p.startswith(d.rstrip("/") + "/") for d in dsts)
