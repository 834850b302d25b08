"""A dry run never needs data: every shipped study (studies/*.yaml) dry-runs where no data set
has been made, as on a fresh clone; the data set is checked, with the ``orch data make``
command that makes the one the study needs, when the sweep runs (orchestrator/plan/sweep.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orchestrator import site
from orchestrator.cli import app
from orchestrator.errors import UserError
from orchestrator.plan import study

from .conftest import ROOT

STUDIES = sorted(p.stem for p in (ROOT / "studies").glob("*.yaml"))


@pytest.mark.parametrize("name", STUDIES)
def test_every_shipped_study_dry_runs_without_its_data(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a study's data: path is relative: nothing of it here
    result = CliRunner().invoke(app, ["sweep", "--study", name, "--dry-run",
                                      "--out", str(tmp_path / "runs")], prog_name="orch")
    assert result.exit_code == 0, result.output
    assert "nothing written or submitted" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no data made


def test_the_sweep_itself_names_the_data_set_to_make(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local = site.load("local")[0]
    loaded = study.load("convergence")
    assert study.expand(loaded, local, dry_run=True)
    with pytest.raises(UserError, match=r"convergence\.yaml:\d+: data: no manifest\.json "
                                        r"there; make the data set with 'orch data make --out "
                                        r"data/digits --from digits --format raw,"):
        study.expand(loaded, local)


def test_a_data_set_that_is_there_is_checked_in_a_dry_run_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "digits").mkdir(parents=True)
    (tmp_path / "data" / "digits" / "manifest.json").write_text("{}")
    with pytest.raises(UserError, match=r"not an orch data manifest"):
        study.expand(study.load("convergence"), site.load("local")[0], dry_run=True)


def test_a_sweep_on_the_command_line_dry_runs_before_its_data_set_is_made(tmp_path):
    args = ["sweep", "--nodes", "1", "--data", str(tmp_path / "later"),
            "--out", str(tmp_path / "runs")]
    dry = CliRunner().invoke(app, [*args, "--dry-run"], prog_name="orch")
    assert dry.exit_code == 0, dry.output
    real = CliRunner().invoke(app, args, prog_name="orch")  # orch's main prints it, exit 2
    assert isinstance(real.exception, UserError) and real.exception.exit_code == 2
    assert str(real.exception) == (f"--data {tmp_path / 'later'}: no manifest.json there; make "
                                   f"the data set with 'orch data make --out "
                                   f"{tmp_path / 'later'} --format raw'")
    assert not (tmp_path / "later").exists() and not (tmp_path / "runs").exists()
