"""Before submitting, orch checks each run's environment for what its mode needs (the Python
modules its ranks import, the launcher's program) where it can see that environment, and refuses
with one line naming what is missing (orchestrator.site.envs.check_runs)."""

from __future__ import annotations

import pytest

from orchestrator import modes
from orchestrator import site as sitemod
from orchestrator.errors import UserError
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.site import envs

from .conftest import orch

ABSENT = "orch_test_module_that_is_not_installed"


@pytest.fixture
def mpi_ssgd_needs_an_absent_module(monkeypatch):
    """mpi-ssgd's ranks import a module no environment has (as mpi4py would be, missing)."""
    monkeypatch.setattr(modes.get("mpi-ssgd"), "python_modules", ("torch", ABSENT))


def test_every_mode_names_what_its_ranks_import():
    assert modes.get("torch-ddp").needs == ("torch",)
    assert modes.get("mpi-ssgd").needs == ("torch", "mpi4py")
    assert modes.get("chainermn").needs == ("chainer", "chainermn", "mpi4py")
    assert {modes.get(m).library for m in modes.registry()} <= {
        n for m in modes.registry() for n in modes.get(m).needs}


def test_missing_modules_asks_the_environments_python(tmp_path):
    env = sitemod.load("local")[0].environment("torch")
    assert envs.missing_modules(env, ("json", ABSENT)) == [ABSENT]
    broken = env.model_copy(update={"python": "/bin/false"})
    assert envs.missing_modules(broken, (ABSENT,)) == []  # cannot tell: the ranks will say


def test_a_run_whose_mode_module_is_missing_is_refused_in_one_line(
        mpi_ssgd_needs_an_absent_module):
    site = sitemod.load("local")[0]
    runs = expand(SweepSpec(nodes=(1,), modes=("torch-ddp", "mpi-ssgd")), site)
    with pytest.raises(UserError) as exc:
        envs.check_runs(site, runs)
    message = str(exc.value)
    assert "\n" not in message and f"Python module(s) {ABSENT} " in message
    assert "mode(s) mpi-ssgd need" in message and "environment 'torch-mpi'" in message
    envs.check_runs(site, [r for r in runs if r.mode == "torch-ddp"])  # it needs only torch


def test_orch_sweep_refuses_before_submitting(tmp_path, mpi_ssgd_needs_an_absent_module):
    code, _, err = orch("sweep", "--mode", "mpi-ssgd", "--nodes", "1", "--out", tmp_path / "o")
    assert code == 2 and ABSENT in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*/job.json"))


def test_a_launcher_program_missing_here_is_refused(tmp_path, monkeypatch):
    site = sitemod.load("local")[0]
    runs = expand(SweepSpec(nodes=(1,), modes=("mpi-ssgd",), launcher="mpirun"), site)
    monkeypatch.setenv("PATH", str(tmp_path))  # no mpirun on it
    with pytest.raises(UserError, match=r"launcher 'mpirun' of run .*: 'mpirun' is not on PATH"):
        envs.check_runs(site, runs)
