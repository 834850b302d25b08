"""Containers: image files generated from one spec, the per-run container wrapper,
bad input, provenance, reruns, and real multi-rank runs inside a Charliecloud image.

Apptainer/Singularity cannot be installed here: their command lines are tested by golden files
and by running the rendered wrapper against a stand-in executable that records what it was
given. Charliecloud runs for real: the torch image is built without any registry (debootstrap +
chroot, cached under ~/.cache/orch/images by its build hash, so one build serves every test
and every later run) and torch-ddp sweeps run every rank inside it, on the local site and on
the test Slurm cluster. Building needs root: elsewhere those tests skip, under CI=true they fail.
Regenerate golden files after an intended change: ORCH_UPDATE_GOLDEN=1 pytest this file;
regenerate the image files with `orch container generate`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator import containers, modes
from orchestrator import site as sitemod
from orchestrator.errors import UserError
from orchestrator.images import build, recipes, specs
from orchestrator.images.digest import image_digest
from orchestrator.images.image import ImageTree
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.render import render_run

from .conftest import IN_CI, ROOT, check_golden, results, run_orch

FAKE_DIGEST = "sha256:" + "0123456789abcdef" * 4
ITERS, WARMUP = 4, 1


# --- image files generated from the specs --------------------------------------------------


@pytest.mark.parametrize("name", specs.spec_names())
def test_generated_files_are_what_the_generator_makes(name):
    """The checked-in .def and Charliecloud build script are exactly the spec's output."""
    generated = recipes.generate(specs.load_spec(name))
    assert set(generated) == {f"{name}.def", f"{name}.charliecloud.sh"}
    for fname, text in generated.items():
        path = ROOT / "containers" / fname
        assert path.is_file(), f"{path} missing: run 'orch container generate'"
        assert path.read_text() == text, f"{path} is stale: run 'orch container generate'"


def test_every_framework_has_a_spec_and_generate_check_agrees():
    assert {"torch", "torch-mpi", "tensorflow", "mxnet"} <= set(specs.spec_names())
    proc = run_orch("container", "generate", "--check", check=True)
    assert "up to date: " in proc.stderr


@pytest.mark.parametrize("name", specs.spec_names())
def test_generated_files_share_the_install_steps_and_are_valid(name):
    spec = specs.load_spec(name)
    files = recipes.generate(spec)
    definition, script = files[f"{name}.def"], files[f"{name}.charliecloud.sh"]
    proc = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert definition.splitlines()[6:9] == ["Bootstrap: debootstrap", "OSVersion: bookworm",
                                            f"MirrorURL: {spec.base.mirror}"]
    assert "debootstrap --variant=minbase bookworm" in script
    # One set of install steps in both: the %post body is the chroot script, indented.
    install = recipes._jinja().get_template("containers/_install.sh.j2").render(
        spec=spec, marker=specs.marker(spec))
    assert install in script
    assert "\n".join("    " + ln if ln else ln for ln in install.splitlines()) in definition
    assert f"apt-get install -y -q --no-install-recommends {' '.join(spec.apt)}" in install
    for req in spec.pip.local:  # local wheels never come from an index
        assert f"--no-index --no-deps --find-links /opt/orch-wheels \\\n  {req}" in install
    assert specs.spec_hash(spec) in definition and specs.spec_hash(spec) in script


def test_specs_must_pin_every_package():
    spec = yaml.safe_load((ROOT / "containers" / "specs" / "torch.yaml").read_text())
    spec["pip"]["index"].append("requests")
    with pytest.raises(ValueError, match="'requests' is not pinned"):
        specs.SpecFile.model_validate(spec)


def test_every_runtime_declares_what_others_ask():
    """Each registered runtime has a wrapper template, a recipe the generator writes, and an
    image format the builder knows; the site schema lists exactly the registered names."""
    spec = specs.load_spec("torch")
    generated = recipes.generate(spec)
    for name in containers.runtime_names():
        rt = containers.runtime(name)
        assert rt.command and rt.install_hint
        assert (ROOT / "templates" / "containers" / f"{name}.sh.j2").is_file()
        assert rt.recipe(spec.name) in generated
        assert rt.builds in build._BUILDERS
    schema = sitemod.schema()["$defs"]["Container"]["properties"]["runtime"]
    assert schema["enum"] == list(containers.runtime_names())
    assert set(generated) == {containers.runtime(n).recipe(spec.name)
                              for n in containers.runtime_names()}


def test_apptainer_build_is_refused_clearly_without_apptainer_and_siftool(tmp_path):
    """Without apptainer orch assembles the SIF with siftool (tests/test_sif.py); without
    either, one line says what to install."""
    proc = run_orch("container", "build", "torch", "--runtime", "apptainer",
                    env={"PATH": str(tmp_path)})
    assert proc.returncode == 2
    assert "siftool and mksquashfs not installed" in proc.stderr
    assert "apt-get install -y --no-install-recommends siftool squashfs-tools" in proc.stderr
    assert "apptainer build torch.sif containers/torch.def" in proc.stderr
    assert "Traceback" not in proc.stderr


# --- the rendered wrapper: golden files ----------------------------------------------------


def container_site(site_name: str, runtime: str, image: str, binds=()) -> sitemod.Site:
    """A shipped site whose torch environment runs in a container."""
    site = sitemod.load(site_name)[0]
    env = site.environments["torch"].model_copy(update={"container": sitemod.Container(
        image=image, runtime=runtime, binds=list(binds))})
    return site.model_copy(update={"environments": {**site.environments, "torch": env}})


def render_container(site: sitemod.Site, partition: str, nodes: int = 2, run_dir=None,
                     lib=Path("/scratch/runs/.orch/lib-0123456789ab")):
    run = expand(SweepSpec(nodes=(nodes,), partitions=(partition,)), site)[0]
    env = site.environment("torch")
    env = env.model_copy(update={"python": env.python or "/opt/orch/venv/bin/python"})
    rdir = run_dir or Path("/scratch/runs") / run.run_id
    return run, render_run(ResolvedRun(run, site, site.partition(partition), env,
                                       modes.get(run.mode)), rdir, lib, image_digest=FAKE_DIGEST)


WRAPPER_TARGETS = [
    ("apptainer", "local", "local"), ("singularity", "testcluster", "eth"),
    ("apptainer", "example-gpu-cluster", "gpu-ib"),  # --nv
    ("singularity", "example-gpu-cluster", "gpu-eth"),
]


@pytest.mark.parametrize(("runtime", "site_name", "partition"), WRAPPER_TARGETS)
def test_wrapper_and_job_script_golden(runtime, site_name, partition):
    site = container_site(site_name, runtime, "/images/torch.sif",
                          binds=["/datasets/cifar", "/ssd/cache:/cache"])
    _, r = render_container(site, partition)
    (name, wrapper), = r.files
    assert name == "container-python"
    stem = f"{runtime}.{site_name}.{partition}"
    check_golden(f"containers/{stem}.container-python", wrapper)
    check_golden(f"containers/{stem}.job.sbatch", r.job_script)
    gpu = site.partition(partition).gpus_per_node > 0
    assert (" --nv " in wrapper) is gpu
    assert f"{runtime} exec --cleanenv" in wrapper
    assert 'export ORCH_PYTHON="$RUN_DIR/container-python"' in r.job_script
    assert "command -v " + runtime in r.job_script  # fails fast on a node without it


def test_container_changes_nothing_for_other_sites():
    """Without a container the job script is the old one (tests/test_render.py goldens)."""
    site = sitemod.load("local")[0]
    run = expand(SweepSpec(nodes=(2,)), site)[0]
    env = site.environment("torch").model_copy(update={"python": "/opt/orch/venv/bin/python"})
    r = render_run(ResolvedRun(run, site, site.partition(None), env, modes.get(run.mode)),
                   Path("/scratch/runs") / run.run_id, Path("/scratch/runs/.orch/lib-0123456789ab"))
    assert r.files == ()
    assert "container" not in r.job_script
    assert "export ORCH_PYTHON=/opt/orch/venv/bin/python\n" in r.job_script


def _fake_runtime(bindir: Path, name: str) -> Path:
    """A stand-in for the runtime: records its arguments and environment, one per line."""
    log = bindir / f"{name}.log"
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / name).write_text(f"#!/bin/bash\n{{ printf 'ARG %s\\n' \"$@\"; env -0 | "
                               f"tr '\\0' '\\n' | sed 's/^/ENV /'; }} >{log}\n")
    (bindir / name).chmod(0o755)
    return log


def _run_wrapper(tmp_path: Path, runtime: str, wrapper: str, extra_env: dict) -> list[str]:
    bindir = tmp_path / "bin"
    log = _fake_runtime(bindir, containers.runtime(runtime).command)
    path = tmp_path / "container-python"
    path.write_text(wrapper)
    path.chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": "/root", **extra_env}
    proc = subprocess.run([str(path), "-c", "print(1)"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()


RANK_ENV = {"RANK": "3", "WORLD_SIZE": "4", "SLURM_PROCID": "3", "MASTER_ADDR": "node1",
            "OMPI_MCA_btl": "self,vader,tcp", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
            "SECRET_TOKEN": "do-not-pass", "LD_LIBRARY_PATH": "/host/lib",
            "ODD": "line one\nline two", "TMPDIR": "/tmp/slurm-node1"}


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_apptainer_wrapper_passes_a_clean_named_environment(tmp_path, runtime):
    site = container_site("example-gpu-cluster", runtime, "/images/torch.sif")
    run, r = render_container(site, "gpu-ib")
    lines = _run_wrapper(tmp_path, runtime, dict(r.files)["container-python"], RANK_ENV)
    args = [ln[4:] for ln in lines if ln.startswith("ARG ")]
    assert args == ["exec", "--cleanenv", "--nv", "--pwd", f"/scratch/runs/{run.run_id}",
                    "--bind", f"/scratch/runs/{run.run_id}",
                    "--bind", "/scratch/runs/.orch/lib-0123456789ab",
                    "/images/torch.sif", "python3", "-c", "print(1)"]
    prefix = "APPTAINERENV_" if runtime == "apptainer" else "SINGULARITYENV_"
    passed = {ln[4:].split("=", 1)[0][len(prefix):]: ln[4:].split("=", 1)[1]
              for ln in lines if ln.startswith("ENV " + prefix)}
    assert passed["RANK"] == "3" and passed["SLURM_PROCID"] == "3"
    assert passed["OMPI_MCA_btl"] == "self,vader,tcp"  # commas intact (no --env splitting)
    assert passed["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert passed["ORCH_CONTAINER_DIGEST"] == FAKE_DIGEST
    assert passed["ORCH_CONTAINER_RUNTIME"] == runtime
    assert passed["TMPDIR"] == "/tmp/slurm-node1"
    for name in ("SECRET_TOKEN", "LD_LIBRARY_PATH", "ODD", "PATH"):
        assert name not in passed


def test_charliecloud_wrapper_passes_a_clean_named_environment(tmp_path):
    site = container_site("local", "charliecloud", "/images/torch")
    _, r = render_container(site, "local", run_dir=tmp_path / "sweep" / "run",
                            lib=Path("/work/sweep/.orch/lib-x"))
    lines = _run_wrapper(tmp_path, "charliecloud", dict(r.files)["container-python"], RANK_ENV)
    args = [ln[4:] for ln in lines if ln.startswith("ARG ")]
    assert args[:3] == ["--unset-env=*", "--set-env", "--env-no-expand"]
    assert "--set-env=RANK=3" in args and "--set-env=OMPI_MCA_btl=self,vader,tcp" in args
    assert "--set-env=TMPDIR=/tmp/slurm-node1" in args
    assert not [a for a in args if "SECRET_TOKEN" in a or "LD_LIBRARY_PATH" in a]
    assert f"--set-env=ORCH_CONTAINER_DIGEST={FAKE_DIGEST}" in args
    # The run dir is under /tmp (shared with the host as it is); the lib dir needs /work.
    assert args[args.index("-b") + 1] == "/work:/work" and args.count("-b") == 1
    assert args[-6:] == [f"--cd={tmp_path}/sweep/run", "/images/torch", "--", "python3", "-c",
                         "print(1)"]
    # ch-run itself: $USER set (it refuses to start without), $TMPDIR unset (host /tmp shared).
    seen = {ln[4:].split("=", 1)[0]: ln[4:].split("=", 1)[1] for ln in lines
            if ln.startswith("ENV ") and "=" in ln}
    assert seen.get("USER") and "TMPDIR" not in seen


def test_charliecloud_binds_only_onto_empty_mount_points(tmp_path):
    image = tmp_path / "image"
    for d in ("opt/venv/bin", "work", "home", "tmp", "etc"):
        (image / d).mkdir(parents=True)
    tree = ImageTree(image)
    c = sitemod.Container(image=str(image), runtime="charliecloud", binds=["/data/x:/data"])
    charliecloud = containers.runtime(c.runtime)
    assert charliecloud.binds(
        ["/work/a/run", "/work/a/.orch/lib-1", "/tmp/b", "/home/u/runs"], c.binds, tree) == [
        "/home:/home", "/work:/work", "/data/x:/data"]
    with pytest.raises(UserError, match="holds image files that a bind would hide"):
        charliecloud.binds(["/opt/runs/x"], c.binds, tree)
    with pytest.raises(UserError, match="has no /srv to mount it on"):
        charliecloud.binds(["/srv/runs/x"], c.binds, tree)


def test_directory_image_digest_is_cached_and_changes_with_the_image(tmp_path):
    image = tmp_path / "image"
    (image / "etc").mkdir(parents=True)
    (image / "etc" / "a").write_text("1")
    os.symlink("a", image / "etc" / "b")
    first = image_digest(image)
    assert first.startswith("sha256:") and image_digest(image) == first
    (image / "etc" / "c").write_text("2")  # a file added: the directory's mtime changes
    second = image_digest(image)
    assert second != first
    f = tmp_path / "image.sqfs"
    f.write_bytes(b"squash")
    import hashlib

    assert image_digest(f) == "sha256:" + hashlib.sha256(b"squash").hexdigest()


# --- bad input: one line, exit 2, nothing written or submitted -----------------------------


def _site_file(tmp_path: Path, base: str, container: dict, name: str = "csite") -> Path:
    data = yaml.safe_load(sitemod.resolve(base).read_text())
    data["name"] = name
    data["environments"]["torch"]["container"] = container
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_missing_image_is_refused_before_anything_is_written(tmp_path):
    site = _site_file(tmp_path, "local", {"image": str(tmp_path / "no-such-image"),
                                          "runtime": "charliecloud"})
    proc = run_orch("sweep", "--site", site, "--nodes", "1", "--out", tmp_path / "x")
    assert proc.returncode == 2, proc.stderr
    assert f"container image {tmp_path / 'no-such-image'} does not exist" in proc.stderr
    assert "orch container build torch --runtime charliecloud" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "x").exists()


def test_unknown_runtime_names_the_field(tmp_path):
    site = _site_file(tmp_path, "local", {"image": "/images/torch", "runtime": "docker"})
    proc = run_orch("sweep", "--site", site, "--nodes", "1", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "environments.torch.container.runtime" in proc.stderr
    assert "'apptainer', 'singularity' or 'charliecloud'" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_runtime_missing_on_the_nodes_is_refused(tmp_path):
    if shutil.which("singularity"):
        pytest.skip("singularity is installed here")
    image = tmp_path / "torch.sif"
    image.write_bytes(b"not really an image")
    site = _site_file(tmp_path, "local", {"image": str(image), "runtime": "singularity"})
    proc = run_orch("sweep", "--site", site, "--nodes", "1", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "container runtime 'singularity' (singularity) is not installed" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_dry_run_prints_the_wrapper(tmp_path):
    site = _site_file(tmp_path, "local", {"image": "/images/torch.sif", "runtime": "apptainer"})
    proc = run_orch("sweep", "--site", site, "--nodes", "2", "--dry-run", "--out",
                    tmp_path / "dry", check=True)
    assert proc.stdout.count("/container-python\n#!/bin/bash\n") == 1
    assert "apptainer exec --cleanenv" in proc.stdout
    assert "digest  unknown" in proc.stdout  # the image is not there: nothing is hashed
    assert not (tmp_path / "dry").exists()


# --- Charliecloud, for real ----------------------------------------------------------------


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


@pytest.fixture(scope="session")
def torch_image() -> Path:
    """The torch image, built once (debootstrap + chroot) and cached by its build hash."""
    _need(os.geteuid() == 0, "building a Charliecloud image needs root (debootstrap, chroot)")
    _need(shutil.which("debootstrap") is not None and shutil.which("ch-run") is not None,
          "debootstrap or ch-run missing: apt-get install -y --no-install-recommends "
          "debootstrap charliecloud-runtime (make container-tools)")
    proc = run_orch("container", "build", "torch", "--runtime", "charliecloud", timeout=3600,
                    check=True)
    image = Path(proc.stdout.strip().splitlines()[-1])
    assert (image / "etc" / "orch-image.json").is_file()
    return image


def _in_container_site(tmp_path: Path, base: str, image: Path) -> Path:
    return _site_file(tmp_path, base, {"image": str(image), "runtime": "charliecloud"},
                      name=f"{base}-charliecloud")


def assert_ranks_in_image(out: Path, image: Path) -> None:
    """Every rank of every run logged, from inside, the image's own marker and digest."""
    digest = image_digest(image)
    spec_sha = specs.spec_hash(specs.load_spec("torch"))
    for rdir in (p for p in out.iterdir() if (p / "run.json").is_file()):
        run = json.loads((rdir / "run.json").read_text())
        prov = json.loads((rdir / "provenance.json").read_text())
        assert prov["container"]["digest"] == digest
        assert prov["container"]["spec"]["spec_sha256"] == spec_sha
        logs = sorted((rdir / "ranks").glob("rank-*.jsonl"))
        assert len(logs) == run["nodes"] * run["tasks_per_node"]
        for log in logs:
            lines = log.read_text().splitlines()
            header, footer = json.loads(lines[0]), json.loads(lines[-1])
            c = header["container"]
            assert c is not None, f"{log}: the rank ran on the host, not in the image"
            assert c["image"] == {"name": "torch", "framework": "torch", "spec_sha256": spec_sha}
            assert c["runtime"] == "charliecloud" and c["digest"] == digest
            assert c["python"] == "/opt/venv/bin/python3"  # the image's, not the host's venv
            assert footer["versions"]["torch"] == "2.13.0+cpu"
            assert header["env"]["ORCH_CONTAINER_IMAGE"] == str(image)


@pytest.fixture(scope="module")
def local_container_sweep(torch_image, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("containers-local")
    site = _in_container_site(tmp, "local", torch_image)
    out = tmp / "sweep"
    proc = run_orch("sweep", "--site", site, "--nodes", "1,2", "--iters", ITERS, "--warmup",
                    WARMUP, "--no-preflight", "--out", out, check=True)  # not about predictions
    return out, proc


@pytest.mark.ranks
def test_local_sweep_runs_every_rank_in_the_image(local_container_sweep, torch_image):
    out, _ = local_container_sweep
    recs = results(out)
    assert [(r["nodes"], r["ranks"], r["state"]) for r in recs] == [(1, 1, "COMPLETED"),
                                                                   (2, 2, "COMPLETED")]
    assert all(r["checksums_agree"] and r["iterations_measured"] == ITERS for r in recs)
    assert_ranks_in_image(out, torch_image)
    for rdir in (p for p in out.iterdir() if (p / "run.json").is_file()):
        wrapper = rdir / "container-python"
        assert wrapper.stat().st_mode & 0o777 == 0o755
        assert 'export ORCH_PYTHON="$RUN_DIR/container-python"' in (rdir / "job.sbatch").read_text()


@pytest.mark.ranks
def test_show_prints_the_image_digest(local_container_sweep, torch_image):
    out, _ = local_container_sweep
    run_id = next(r["run_id"] for r in results(out) if r["nodes"] == 2)
    proc = run_orch("show", run_id, "--dir", out, check=True)
    digest = image_digest(torch_image)
    assert f"image digest {digest}" in proc.stdout
    assert "ranks        2 logged, 2 inside the image" in proc.stdout
    assert "torch 2.13.0+cpu" in proc.stdout
    info = json.loads(run_orch("show", run_id, "--dir", out, "--json", check=True).stdout)
    prov = info["provenance"]
    assert prov["container"]["digest"] == digest
    assert len(prov["site"]["sha256"]) == 64 and prov["site"]["config"]["name"] == \
        "local-charliecloud"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                            text=True)
    if commit.returncode == 0:
        assert prov["orch"]["git_commit"] == commit.stdout.strip()
    assert set(prov["scripts"]["files"]) == {"job.sbatch", "launch.sh", "container-python"}
    assert prov["env"]["GLOO_SOCKET_IFNAME"] == "lo"


@pytest.mark.ranks
def test_rerun_reproduces_a_run_beside_the_old_one(local_container_sweep, torch_image):
    out, _ = local_container_sweep
    run_id = next(r["run_id"] for r in results(out) if r["nodes"] == 2)
    old = out / run_id
    before = {p: p.read_bytes() for p in old.rglob("*") if p.is_file()}
    proc = run_orch("rerun", run_id, "--dir", out, check=True)
    new = out / "reruns" / "1" / run_id
    assert proc.stdout.strip() == str(new)
    assert {p: p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    # Same scripts but for the run directory; same image; the new result merges on its own.
    for name in ("job.sbatch", "launch.sh", "container-python"):
        assert (new / name).read_text() == (old / name).read_text().replace(str(old), str(new))
    prov_old = json.loads((old / "provenance.json").read_text())
    prov_new = json.loads((new / "provenance.json").read_text())
    assert prov_new["scripts"]["normalized"] == prov_old["scripts"]["normalized"]
    assert prov_new["rerun_of"]["run_dir"] == str(old)
    assert prov_new["container"]["digest"] == prov_old["container"]["digest"]
    [rec] = results(new.parent)
    assert rec["state"] == "COMPLETED" and rec["run_id"] == run_id and rec["ranks"] == 2
    assert_ranks_in_image(new.parent, torch_image)
    assert len(results(out)) == 2  # the original sweep's result set is unchanged
    # Never over an existing run.
    again = run_orch("rerun", run_id, "--dir", out, "--out", new.parent)
    assert again.returncode == 2 and "a rerun never writes over a run" in again.stderr


@pytest.mark.ranks
def test_run_dir_on_a_mount_point_is_bound(torch_image, tmp_path):
    """A sweep outside /tmp reaches the ranks through the image's empty mount point.

    The sweep goes under the checkout when that is below a mount point (/work/...), else
    under a mount point made for the test (/scratch, as root; removed after), so the test runs
    wherever CI clones the repository."""
    made = None
    top = "/" + ROOT.parts[1] if len(ROOT.parts) > 1 else None
    if top in specs.DEFAULT_MOUNT_POINTS and os.access(ROOT, os.W_OK):
        base = ROOT / "runs"
    else:
        top = next((m for m in specs.DEFAULT_MOUNT_POINTS if Path(m).is_dir()
                    and os.access(m, os.W_OK)), None)
        if top is None:
            top = specs.DEFAULT_MOUNT_POINTS[1]  # /scratch
            try:
                Path(top).mkdir()
            except OSError as exc:
                _need(False, f"no writable mount point directory ({top}: {exc})")
            made = Path(top)
        base = Path(top)
    out = base / f".test-containers-{os.getpid()}"
    try:
        site = _in_container_site(tmp_path, "local", torch_image)
        run_orch("sweep", "--site", site, "--nodes", "1", "--iters", 2, "--warmup", 1,
                 "--out", out, check=True)
        rdir = next(p for p in out.iterdir() if (p / "run.json").is_file())
        assert f"binds=(\n  -b {top}:{top}\n)" in (rdir / "container-python").read_text()
        assert results(out)[0]["state"] == "COMPLETED"
        assert_ranks_in_image(out, torch_image)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


@pytest.mark.ranks
def test_squashfs_image_runs_every_rank(torch_image, tmp_path):
    """The same image as one SquashFS file (mksquashfs of the tree; ch-run mounts it)."""
    _need(shutil.which("mksquashfs") is not None, "mksquashfs missing (squashfs-tools)")
    proc = run_orch("container", "build", "torch", "--runtime", "charliecloud", "--squash",
                    timeout=1800, check=True)
    sqfs = Path(proc.stdout.strip().splitlines()[-1])
    assert sqfs == torch_image.with_name(torch_image.name + ".sqfs") and sqfs.is_file()
    site = _site_file(tmp_path, "local", {"image": str(sqfs), "runtime": "charliecloud"},
                      name="local-squashfs")
    out = tmp_path / "sweep"
    run_orch("sweep", "--site", site, "--nodes", "2", "--iters", 2, "--warmup", 1, "--out", out,
             check=True)
    assert results(out)[0]["state"] == "COMPLETED"
    assert_ranks_in_image(out, sqfs)


@pytest.mark.slurm
def test_runtime_missing_on_the_cluster_nodes_is_refused(slurm_cluster, tmp_path):
    """The test cluster's nodes are this machine: a missing runtime is caught before sbatch."""
    if shutil.which("apptainer"):
        pytest.skip("apptainer is installed here")
    image = tmp_path / "torch.sif"
    image.write_bytes(b"not really an image")
    site = _site_file(tmp_path, slurm_cluster, {"image": str(image), "runtime": "apptainer"})
    proc = run_orch("sweep", "--site", site, "--nodes", "1", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "container runtime 'apptainer' (apptainer) is not installed" in proc.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slurm
@pytest.mark.ranks
def test_slurm_sweep_runs_every_rank_in_the_image(slurm_cluster, torch_image, tmp_path):
    site = _in_container_site(tmp_path, slurm_cluster, torch_image)
    out = tmp_path / "sweep"
    run_orch("sweep", "--site", site, "--nodes", "1,2,4", "--iters", ITERS, "--warmup", WARMUP,
             "--no-preflight", "--out", out, check=True, timeout=1800)  # not about predictions
    recs = results(out)
    assert sorted(r["nodes"] for r in recs) == [1, 2, 4]
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["distinct_hosts"] == r["nodes"] and r["checksums_agree"] is True
    assert_ranks_in_image(out, torch_image)
    # One run again, from its record alone, on the cluster.
    run_id = next(r["run_id"] for r in recs if r["nodes"] == 2)
    run_orch("rerun", run_id, "--dir", out, check=True, timeout=900)
    [rec] = results(out / "reruns" / "1")
    assert rec["state"] == "COMPLETED" and rec["distinct_hosts"] == 2
    assert_ranks_in_image(out / "reruns" / "1", torch_image)
