"""orch works from an installed wheel, not only from a checkout: templates, site configs and
framework environments ship inside the package (orchestrator/_data) and are found there."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from .conftest import ROOT


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           "-w", str(tmp), str(ROOT)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    wheel = next(tmp.glob("orch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    return site, names


def test_wheel_carries_templates_and_site_configs(wheel_site):
    _, names = wheel_site
    for path in ("orchestrator/_data/templates/job.sbatch.j2",
                 "orchestrator/_data/templates/launchers/srun.j2",
                 "orchestrator/modes/torch_ddp/launch.sh.j2",  # a mode folder carries its template
                 "orchestrator/_data/site-configs/local.yaml",
                 "orchestrator/_data/site-configs/testcluster.yaml",
                 "orchestrator/_data/frameworks/torch-mpi.yaml",
                 "orchestrator/_data/frameworks/mxnet.yaml",
                 "orchestrator/rankside/harness.py"):
        assert path in names


def test_installed_copy_renders_outside_the_checkout(wheel_site, tmp_path):
    site, _ = wheel_site
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import orchestrator.resources as r; "
                            "print(r.data_dir('templates'))"], capture_output=True, text=True,
                           cwd=tmp_path, env=env, check=True).stdout.strip()
    assert where.startswith(str(site)), where
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "--nodes", "1",
                           "--dry-run", "--out", str(tmp_path / "runs")], capture_output=True,
                          text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "#!/bin/bash" in proc.stdout and "torch_ddp" in proc.stdout
    listed = subprocess.run([sys.executable, "-m", "orchestrator", "site", "list"],
                            capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert "testcluster" in listed.stdout and "local" in listed.stdout
    envs = subprocess.run([sys.executable, "-m", "orchestrator", "env", "list"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert "frameworks/torch-mpi.yaml" in envs.stdout  # site builds resolve in the wheel too
