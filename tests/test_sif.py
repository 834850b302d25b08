"""SIF files (Apptainer/Singularity images) built here without Apptainer, checked, and run.

Apptainer is not packaged for Debian 12; ``siftool`` (the SIF reference implementation) is.
``orch container build torch --runtime apptainer`` assembles ``torch.sif`` from the cached
Charliecloud build (its tree and SquashFS, tests/test_containers.py), so the SIF costs seconds
once that exists. Checked here: orch's SIF reader against ``siftool list``/``info``, the
descriptor table against a golden record (tests/golden/sif-descriptors.json), the partition
``siftool dump`` gives back (the build keeps no copy of it), the SIF's digest and labels in a run's
provenance, the rendered ``apptainer exec`` line against the SIF and ``apptainer build`` where
Apptainer exists (a stand-in ``apptainer`` records what it is given), and the root filesystem
dumped from the SIF running torch-ddp ranks under Charliecloud on the local site and on the
test Slurm cluster. What only an Apptainer installation can show (its own mount of the
partition, ``--nv``) is docs/howto/apptainer.md's list. Building needs root (debootstrap,
chroot): elsewhere those tests skip, under CI=true they fail. Regenerate the golden record
after an intended change: ORCH_UPDATE_GOLDEN=1 pytest tests/test_sif.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pydantic
import pytest

from orchestrator import execute
from orchestrator.errors import UserError
from orchestrator.images import build, sif, sifbuild, specs
from orchestrator.images.image import inspect
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.runs import provenance

from .conftest import IN_CI, ROOT, check_golden, results, run_orch
from .test_containers import _run_wrapper, _site_file, assert_ranks_in_image, container_site


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


def _need_tools() -> None:
    _need(all(shutil.which(t) for t in sifbuild.TOOLS),
          "siftool or mksquashfs missing: apt-get install -y --no-install-recommends siftool "
          "squashfs-tools (make container-tools)")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# --- without an image: the reader, the layout, bad input -----------------------------------


def _siftool_info(path: Path, object_id: int) -> dict[str, str]:
    proc = subprocess.run(["siftool", "info", str(object_id), str(path)], capture_output=True,
                          text=True, check=True)
    return {k.strip(): v.strip() for k, _, v in
            (ln.partition(":") for ln in proc.stdout.splitlines()) if v}


def test_reader_agrees_with_siftool(tmp_path):
    """A small SIF assembled by siftool reads back, by orch's reader, as siftool shows it."""
    _need_tools()
    (tmp_path / "root" / "bin").mkdir(parents=True)
    (tmp_path / "root" / "bin" / "sh").write_text("#!/bin/sh\n")
    rootfs = tmp_path / "root.sqfs"
    subprocess.run(["mksquashfs", tmp_path / "root", rootfs, "-noappend", "-all-root",
                    "-quiet", "-no-progress"], check=True)
    definition = tmp_path / "small.def"
    definition.write_text("Bootstrap: scratch\n")
    path = tmp_path / "small.sif"
    sifbuild.assemble(path, definition, rootfs, {"org.orch.image": "small"})
    assert sif.is_sif(path) and not sif.is_sif(rootfs)
    descs = sif.descriptors(path)
    assert [d.type for d in descs] == ["Def.FILE", "FS", "JSON.Labels"]
    for d in descs:
        info = _siftool_info(path, d.id)
        assert (info["Data Type"], int(info["ID"]), int(info["Offset"]), int(info["Size"])) \
            == (d.type, d.id, d.offset, d.size)
        if d.type == "FS":  # siftool marks the primary system partition with a '*'
            assert (info["Filesystem Type"], info["Partition Type"], info["Architecture"]) \
                == (d.fs, "*System", d.arch)
    assert sif.primary_partition(path).arch == sif.ARCH_NAMES[sif.ARCHS[platform.machine()]]
    assert sif.labels(path) == {"org.orch.image": "small"}
    assert sif.read_object(path, descs[0]) == definition.read_bytes()
    assert sifbuild.verify(path, rootfs).partition == "PrimSys"
    with pytest.raises(UserError, match="not a SIF file"):
        sif.descriptors(rootfs)
    cut = tmp_path / "cut.sif"
    cut.write_bytes(path.read_bytes()[:8192])  # the header, half the descriptor table
    with pytest.raises(UserError, match="a truncated SIF file"):
        sif.descriptors(cut)


def _dump_partition(path: Path, dest: Path) -> Path:
    """The SIF's primary partition as ``siftool dump`` gives it back, written to ``dest``."""
    with open(dest, "wb") as fh:
        subprocess.run(["siftool", "dump", str(sif.primary_partition(path).id), str(path)],
                       stdout=fh, check=True)
    return dest


def test_a_sif_build_keeps_no_copy_of_its_root_filesystem(tmp_path):
    """The SquashFS packed into the SIF is a working file: gone once the SIF holds it, as is
    the NAME.sif.rootfs.sqfs an earlier build left beside the SIF it replaces; the SIF gives
    the partition back, with the layout appended to the tree's SquashFS."""
    _need_tools()
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "sh").write_text("#!/bin/sh\n")
    base = tmp_path / "tree.sqfs"
    subprocess.run(["mksquashfs", tree, base, "-noappend", "-all-root", "-quiet",
                    "-no-progress"], check=True)
    definition = tmp_path / "small.def"
    definition.write_text("Bootstrap: scratch\n")
    out = tmp_path / "images"
    out.mkdir()
    path = out / "small.sif"
    stale = out / "small.sif.rootfs.sqfs"
    stale.write_bytes(b"the partition of the SIF this build replaces")
    spec = specs.load_spec("torch")
    assert sifbuild.build_sif(spec, tree, base, definition, path, {"org.orch.image": "small"}) \
        == path
    assert sorted(p.name for p in out.iterdir()) == ["small.sif"]
    assert sif.labels(path) == {"org.orch.image": "small"}
    dumped = _dump_partition(path, tmp_path / "rootfs.sqfs")
    listing = subprocess.run(["unsquashfs", "-lls", "-d", "", str(dumped)], capture_output=True,
                             text=True, check=True).stdout
    assert "/bin/sh" in listing and "/.singularity.d/runscript" in listing


@pytest.mark.parametrize("tool", sorted(sifbuild.TOOLS))
def test_a_missing_tool_names_its_debian_package(tmp_path, tool):
    """Without apptainer, siftool and mksquashfs: one line naming the package, exit 2."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for other in set(sifbuild.TOOLS) - {tool}:  # only found on PATH, never run
        (bindir / other).write_text("#!/bin/sh\nexit 1\n")
        (bindir / other).chmod(0o755)
    proc = run_orch("container", "build", "torch", "--runtime", "apptainer", "--out",
                    tmp_path / "images", env={"PATH": str(bindir)})
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert f"{tool} not installed" in line
    assert f"apt-get install -y --no-install-recommends {sifbuild.TOOLS[tool]} " in line
    assert "'apptainer build torch.sif containers/torch.def'" in line
    assert not (tmp_path / "images").exists()


def test_where_apptainer_exists_it_builds_the_sif(tmp_path):
    """apptainer on PATH: `apptainer build` runs (here a stand-in that records its arguments
    and writes an empty SIF with siftool), and the image says it was built so."""
    _need_tools()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "apptainer.log"
    # build --force IMAGE DEFINITION: writes IMAGE only, and only a new file
    (bindir / "apptainer").write_text(f'#!/bin/sh\necho "$PWD $*" >{log}\n'
                                      f'test ! -e "$3" && exec siftool new "$3"\n')
    (bindir / "apptainer").chmod(0o755)
    out = tmp_path / "images"
    proc = run_orch("container", "build", "torch", "--runtime", "apptainer", "--out", out,
                    env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    sif_path = out / "torch.sif"
    assert proc.stdout.strip() == str(sif_path)
    assert log.read_text().split() == [str(ROOT), "build", "--force", str(sif_path),
                                       str(ROOT / "containers" / "torch.def")]
    facts = inspect(container_site("local", "apptainer", str(sif_path))
                    .environment("torch").container)
    assert (facts.built_with, facts.spec, facts.kind) == ("apptainer build", None, "file")
    assert facts.digest == "sha256:" + _sha256(sif_path)


def test_layout_is_what_apptainer_reads(tmp_path):
    """/.singularity.d (environment, runscript, labels, definition) and the mount points the
    tree lacks; the spec's environment values are data, never shell code."""
    spec = specs.load_spec("torch")
    spec = spec.model_copy(update={"env": {**spec.env, "ODD": "$(touch pwned); 'x' \"y\""}})
    (tmp_path / "tree" / "etc").mkdir(parents=True)
    files = sifbuild.layout(spec, tmp_path / "tree", "Bootstrap: debootstrap\n",
                            {"org.orch.image": "torch"})
    assert {"dev", "proc", "sys", "tmp", "var/tmp", "home", "root"} <= set(files)
    assert "etc" not in files  # there already
    assert files[".singularity.d/runscript"][1] == 0o755
    assert json.loads(files[".singularity.d/labels.json"][0]) == {"org.orch.image": "torch"}
    env_sh = tmp_path / "90-environment.sh"
    env_sh.write_text(files[".singularity.d/env/90-environment.sh"][0])
    proc = subprocess.run(["sh", "-c", f'. "{env_sh}"; printf %s "$ODD"; echo; echo $PATH'],
                          cwd=tmp_path, capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == ["$(touch pwned); 'x' \"y\"", spec.path]
    assert not (tmp_path / "pwned").exists()


def test_the_layout_scripts_pass_shellcheck(tmp_path):
    """They run under the image's /bin/sh (dash): checked as POSIX sh."""
    tool = shutil.which("shellcheck")
    _need(tool is not None, "shellcheck is not installed (make container-tools)")
    spec = specs.load_spec("torch")
    files = sifbuild.layout(spec, tmp_path, "", {})
    paths = []
    for rel in (".singularity.d/env/90-environment.sh", ".singularity.d/runscript"):
        paths.append(tmp_path / rel.replace("/", "_"))
        paths[-1].write_text(files[rel][0])
    proc = subprocess.run([tool, "--severity=style", "--shell=sh", *map(str, paths)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_spec_variable_that_is_no_name_is_refused():
    spec = specs.load_spec("torch")
    bad = spec.model_copy(update={"env": {"A-B": "1"}})
    with pytest.raises(UserError, match=r"containers/specs/torch.yaml: env: 'A-B' is not a "
                                         r"variable name"):
        sifbuild.environment_script(bad)


# --- torch.sif, built here with siftool ----------------------------------------------------


@pytest.fixture(scope="session")
def torch_sif() -> Path:
    """torch.sif, assembled from the cached Charliecloud build (built first when missing)."""
    _need(os.geteuid() == 0, "building an image needs root (debootstrap, chroot)")
    _need(shutil.which("debootstrap") is not None, "debootstrap missing (make container-tools)")
    _need_tools()
    if shutil.which("apptainer"):
        pytest.skip("apptainer is installed here: it builds the SIF itself")
    proc = run_orch("container", "build", "torch", "--runtime", "apptainer", timeout=3600,
                    check=True)
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path == build.sif_path_of(specs.load_spec("torch"))
    return path


def descriptor_record(path: Path) -> dict:
    """The golden record: header, descriptors and labels, less what depends on the content
    (offsets, sizes, the commit, hashes) or on the machine (its architecture)."""
    here = sif.ARCH_NAMES[sif.ARCHS[platform.machine()]]
    arch = {here: "(this machine)"}
    varying = {"org.orch.commit", "org.orch.build-key", "org.orch.spec-sha256",
               "org.orch.marker", "org.label-schema.build-arch"}
    rows = []
    for d in sif.descriptors(path):
        row = d.record()
        row["arch"] = arch.get(row["arch"], row["arch"])
        rows.append(row)
    head = sif.header(path)
    return {"version": head["version"], "arch": arch.get(head["arch"], head["arch"]),
            "descriptors": rows,
            "labels": {k: ("(varies)" if k in varying else v)
                       for k, v in sorted(sif.labels(path).items())}}


def test_sif_descriptors_golden_and_siftool_agrees(torch_sif):
    spec = specs.load_spec("torch")
    check_golden("sif-descriptors.json",
                 json.dumps(descriptor_record(torch_sif), indent=1) + "\n")
    listing = subprocess.run(["siftool", "list", str(torch_sif)], capture_output=True,
                             text=True, check=True).stdout
    assert f"|FS (Squashfs/*System/{sif.header(torch_sif)['arch']})" in listing
    labels = sif.labels(torch_sif)
    assert labels["org.orch.spec-sha256"] == specs.spec_hash(spec)
    assert labels["org.orch.build-key"] == build.build_key(spec)
    assert json.loads(labels["org.orch.marker"]) == json.loads(specs.marker(spec))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True)
    if commit.returncode == 0 and labels["org.orch.commit"] != commit.stdout.strip():
        # An up-to-date SIF keeps the commit that built it: it is an ancestor of HEAD.
        assert subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor",
                               labels["org.orch.commit"], "HEAD"]).returncode == 0
    [definition] = [d for d in sif.descriptors(torch_sif) if d.type == "Def.FILE"]
    assert sif.read_object(torch_sif, definition) == \
        (specs.containers_dir() / "torch.def").read_bytes()


@pytest.fixture(scope="session")
def dumped_partition(torch_sif, tmp_path_factory) -> Path:
    """The primary partition, dumped from torch.sif with siftool: a SquashFS file (the build
    checked it byte for byte against the SquashFS it packed, and kept no copy of that)."""
    return _dump_partition(torch_sif, tmp_path_factory.mktemp("sif-partition") / "rootfs.sqfs")


def test_the_partition_siftool_dumps_holds_the_layout(dumped_partition, torch_sif):
    """Inside it, what Apptainer reads, the labels as in the SIF."""
    rootfs = dumped_partition
    listing = subprocess.run(["unsquashfs", "-lls", "-d", "", str(rootfs)], capture_output=True,
                             text=True, check=True).stdout
    modes = {(ln.split(None, 5)[5:] or ["/"])[0].split(" -> ")[0]: ln.split()[0]
             for ln in listing.splitlines() if ln.strip()}
    assert modes["/"] == "drwxr-xr-x"  # the root directory (no name): every user may enter
    assert modes["/.singularity.d/runscript"] == "-rwxr-xr-x"
    for path in ("/.singularity.d/env/90-environment.sh", "/.singularity.d/labels.json",
                 "/.singularity.d/Singularity", "/usr/bin/sh", "/etc/orch-image.json",
                 *(f"/{d}" for d in sifbuild.MOUNT_POINTS)):
        assert path in modes, path
    inside = subprocess.run(["unsquashfs", "-cat", str(rootfs), "/.singularity.d/labels.json"],
                            capture_output=True, text=True, check=True).stdout
    assert json.loads(inside) == sif.labels(torch_sif)


def test_a_run_of_the_sif_records_its_digest_and_renders_apptainer_exec(torch_sif, tmp_path):
    """A run of the example GPU cluster (not this machine: prepared, never submitted) with the
    SIF: provenance.json has its digest, spec and how it was built, and the rendered wrapper
    gives apptainer the SIF, --nv, the binds and the digest."""
    site = container_site("example-gpu-cluster", "apptainer", str(torch_sif))
    runs = expand(SweepSpec(nodes=(2,), partitions=("gpu-ib",)), site)
    [prepared] = execute.prepare(runs, site, tmp_path / "sweep")
    prov = json.loads((prepared.rdir / "provenance.json").read_text())
    digest = "sha256:" + _sha256(torch_sif)
    assert prov["container"] == {
        "runtime": "apptainer", "image": str(torch_sif), "digest": digest, "kind": "file",
        "spec": json.loads(specs.marker(specs.load_spec("torch"))), "built_with": "siftool"}
    assert prov["container"] == inspect(site.environment("torch").container).as_dict()
    shown = provenance.format_show(provenance.show(prepared.rdir))
    assert f"image digest {digest}  built with siftool\n" in shown
    wrapper = (prepared.rdir / "container-python").read_text()
    lines = _run_wrapper(tmp_path, "apptainer", wrapper, {"RANK": "1"})
    args = [ln[4:] for ln in lines if ln.startswith("ARG ")]
    assert args[:3] == ["exec", "--cleanenv", "--nv"]
    assert ["--bind", str(prepared.rdir)] == args[args.index("--bind"):args.index("--bind") + 2]
    assert args[-4:] == [str(torch_sif), "python3", "-c", "print(1)"]
    env = dict(ln[4:].split("=", 1) for ln in lines if ln.startswith("ENV APPTAINERENV_"))
    assert env["APPTAINERENV_ORCH_CONTAINER_DIGEST"] == digest
    assert env["APPTAINERENV_RANK"] == "1"


def test_container_list_shows_the_sif(torch_sif):
    proc = run_orch("container", "list", check=True, env={"COLUMNS": "250"})
    [row] = [ln for ln in proc.stdout.splitlines() if ln.split()[:1] == ["torch"]]
    size = f"{torch_sif.stat().st_size / 2**20:,.0f} MiB"
    assert str(torch_sif) in row and size in row and "siftool" in row.split()
    assert _sha256(torch_sif)[:16] in row


# --- the SIF's root filesystem runs here (under Charliecloud) ------------------------------


@pytest.fixture(scope="session")
def sif_partition(dumped_partition) -> Path:
    """The partition dumped from torch.sif: a SquashFS file that ch-run mounts with
    squashfuse, as unprivileged Apptainer mounts the partition inside the SIF. (Unpacking it
    with unsquashfs would add a minute of writing 1.2 GB, and as much again removing it, for
    the same files.)"""
    _need(shutil.which("ch-run") is not None, "ch-run missing (make container-tools)")
    return dumped_partition


@pytest.mark.ranks
def test_sif_contents_run_a_local_sweep(sif_partition, tmp_path):
    """As `apptainer run` would: the environment script sourced, the runscript; then every
    rank of a local torch-ddp sweep inside the SIF's root filesystem."""
    proc = subprocess.run(
        ["ch-run", "--unset-env=*", str(sif_partition), "--", "/bin/sh", "-c",
         ". /.singularity.d/env/90-environment.sh && exec /.singularity.d/runscript -c "
         "'import os, torch; print(torch.__version__, os.environ[\"OMP_NUM_THREADS\"])'"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "USER": "root"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2.13.0+cpu", "1"]
    site = _site_file(tmp_path, "local", {"image": str(sif_partition), "runtime": "charliecloud"},
                      name="local-sif-partition")
    out = tmp_path / "sweep"
    run_orch("sweep", "--site", site, "--nodes", "2", "--iters", 2, "--warmup", 1,
             "--no-preflight", "--out", out, check=True)
    [rec] = results(out)
    assert rec["state"] == "COMPLETED" and rec["ranks"] == 2 and rec["checksums_agree"]
    assert_ranks_in_image(out, sif_partition)


@pytest.mark.slurm
@pytest.mark.ranks
def test_sif_contents_run_a_slurm_sweep(slurm_cluster, sif_partition, tmp_path):
    site = _site_file(tmp_path, slurm_cluster, {"image": str(sif_partition),
                                                "runtime": "charliecloud"}, name="tc-sif")
    out = tmp_path / "sweep"
    run_orch("sweep", "--site", site, "--nodes", "2", "--iters", 2, "--warmup", 1,
             "--no-preflight", "--out", out, check=True, timeout=900)
    [rec] = results(out)
    assert rec["state"] == "COMPLETED", rec["reason"]
    assert rec["distinct_hosts"] == 2 and rec["checksums_agree"] is True
    assert_ranks_in_image(out, sif_partition)


@pytest.mark.parametrize("key", ["FOO\n", "A-B", "1X"])
def test_a_spec_variable_name_is_checked_whole_when_the_spec_is_read(key):
    """A key that is a name but for a trailing newline would end the export line it is
    written into: refused when the spec is validated, and by the environment script."""
    data = specs.load_spec("torch").model_dump()
    data["env"] = {key: "1"}
    with pytest.raises(pydantic.ValidationError, match="not a valid environment variable name"):
        specs.ImageSpec.model_validate(data)
    bad = specs.load_spec("torch").model_copy(update={"env": {key: "1"}})
    with pytest.raises(UserError, match="is not a variable name"):
        sifbuild.environment_script(bad)
