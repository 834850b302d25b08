"""Every script orch renders passes shellcheck at warning level, the linter site admins run on
job scripts: each mode's job.sbatch and launch.sh on every launcher and scheduler, the container
wrappers and image build scripts of every runtime, the pack and array scripts, and the golden
files the other tests compare against.

shellcheck is one of ``make test``'s apt tools; without it these tests skip, except under
``CI=true`` where they fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator import backends, modes
from orchestrator import site as sitemod
from orchestrator.containers.base import runtime_names
from orchestrator.execute import packs
from orchestrator.images import recipes, specs
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.render import Rendered, render_run
from orchestrator.runs.rundir import JobRecord, Prepared

from .conftest import IN_CI, model_of

GOLDEN = Path(__file__).parent / "golden"
RUNS = Path("/scratch/runs")
LIB = RUNS / ".orch" / "lib-0123456789ab"
# (site, partition): the local scheduler, and Slurm on CPU and GPU partitions of each interconnect.
TARGETS = [("local", "local"), ("testcluster", "ib"), ("testcluster", "eth"),
           ("example-gpu-cluster", "gpu-ib"), ("example-gpu-cluster", "gpu-eth")]


def shellcheck(paths: list[Path]) -> None:
    """Fail with shellcheck's own report when any of ``paths`` has a warning or an error."""
    tool = shutil.which("shellcheck")
    if tool is None:
        if IN_CI:
            pytest.fail("CI=true but shellcheck is not installed (make test installs it)")
        pytest.skip("shellcheck is not installed (make test installs it)")
    assert paths
    proc = subprocess.run([tool, "--severity=warning", "--shell=bash", *map(str, paths)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def render(site: sitemod.Site, partition: str, mode: str, launcher: str | None = None,
           packed: bool = False) -> Rendered:
    spec = {"launcher": launcher} if launcher else {}
    run = expand(SweepSpec(nodes=(2,), modes=(mode,), partitions=(partition,),
                           **model_of(mode, spec)), site)[0]
    env = site.environment(run.framework)
    env = env.model_copy(update={"python": env.python or "/opt/orch/venv/bin/python"})
    return render_run(ResolvedRun(run, site, site.partition(partition), env, modes.get(mode)),
                      RUNS / run.run_id, LIB, packed=packed,
                      image_digest="sha256:" + "0" * 64 if env.container else None)


def write(rendered: Rendered, folder: Path) -> list[Path]:
    """The rendered job script, launch script and extra files (a container wrapper), on disk."""
    folder.mkdir(parents=True)
    texts = [("job.sbatch", rendered.job_script), ("launch.sh", rendered.launch_script),
             *rendered.files]
    for name, text in texts:
        (folder / name).write_text(text)
    return [folder / name for name, _ in texts]


def container_site(site_name: str, runtime: str) -> sitemod.Site:
    """A shipped site whose torch environment runs in a container of ``runtime``."""
    site = sitemod.load(site_name)[0]
    image = "/images/torch" if runtime == "charliecloud" else "/images/torch.sif"
    env = site.environments["torch"].model_copy(update={"container": sitemod.Container(
        image=image, runtime=runtime, binds=["/datasets/cifar", "/ssd/cache:/cache"])})
    return site.model_copy(update={"environments": {**site.environments, "torch": env}})


@pytest.mark.parametrize(("site_name", "partition"), TARGETS)
def test_every_mode_and_launcher_renders_clean_scripts(tmp_path, site_name, partition):
    site = sitemod.load(site_name)[0]
    paths = []
    for name in sorted(modes.registry()):
        # Every launcher of the mode that the site's scheduler has.
        launchers = [lch for lch in modes.get(name).launchers
                     if site.scheduler in backends.launcher(lch).schedulers]
        for launcher in launchers:
            paths += write(render(site, partition, name, launcher), tmp_path / f"{name}-{launcher}")
    shellcheck(paths)


def test_packed_run_pack_and_array_scripts_are_clean(tmp_path):
    site = sitemod.load("testcluster")[0]
    paths = write(render(site, "ib", "torch-ddp", packed=True), tmp_path / "packed")
    for kind, nodes, repeats in (("pack", (1, 2, 4), 1), ("array", (1,), 2)):
        runs = expand(SweepSpec(nodes=nodes, repeats=repeats), site)
        prepared = [Prepared(r, RUNS / r.run_id, JobRecord(run_id=r.run_id, scheduler="slurm"),
                             "submit") for r in runs]
        for k, group in enumerate(packs.groups(prepared, site, kind)):
            name = f"{kind}-{k}"
            path = tmp_path / f"{name}.sbatch"
            path.write_text(packs.render(group, site, RUNS, RUNS / "packs" / name, name))
            paths.append(path)
    shellcheck(paths)


@pytest.mark.parametrize("runtime", runtime_names())
def test_container_wrappers_and_job_scripts_are_clean(tmp_path, runtime):
    paths = []
    for site_name, partition in TARGETS:
        site = container_site(site_name, runtime)
        paths += write(render(site, partition, "torch-ddp"), tmp_path / f"{site_name}-{partition}")
    shellcheck(paths)


def test_image_build_scripts_are_clean(tmp_path):
    paths = []
    for name in specs.spec_names():
        for fname, text in recipes.generate(specs.load_spec(name)).items():
            if fname.endswith(".sh"):
                path = tmp_path / fname
                path.write_text(text)
                paths.append(path)
    shellcheck(paths)


def test_golden_scripts_are_clean():
    shellcheck(sorted(p for p in GOLDEN.rglob("*") if p.is_file() and p.suffix != ".json"
                      and "ranklogs" not in p.relative_to(GOLDEN).parts))
