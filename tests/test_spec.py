"""orchestrator.spec: each sweep setting declared once, and everything derived from it — orch
sweep's options, SweepSpec, the study file's fields and zip dimensions, the run columns — with one
validate for the command line and study files."""

from __future__ import annotations

import pytest

from orchestrator import site as sitemod
from orchestrator.cli import COMMANDS, load
from orchestrator.errors import UserError
from orchestrator.plan import study
from orchestrator.spec import settings
from orchestrator.spec.api import Run, column_names
from orchestrator.spec.schema import SweepSpec


def sweep_command():
    return load(next(e for e in COMMANDS if e.name == "sweep"))


def test_every_setting_is_an_option_of_orch_sweep_with_its_help_and_default():
    params = {p.name: p for p in sweep_command().params}
    for s in settings.SETTINGS:
        opt = params[s.param]
        assert s.option in opt.opts, (s.name, opt.opts)
        assert opt.help == s.help
        # The option's default, parsed as the command line parses it, is the spec's default.
        assert s.from_cli(opt.default) == s.default, s.name
    for name, text in settings.OPTION_FLAGS.items():
        assert params[name].help == text and params[name].default is None


def test_sweep_spec_has_one_field_per_setting_and_the_options():
    assert set(SweepSpec.model_fields) == {s.name for s in settings.SETTINGS} | {"options"}
    assert SweepSpec() == SweepSpec(**{s.name: s.default for s in settings.SETTINGS})


def test_study_fields_are_the_settings_a_study_may_give():
    own = {"name", "description", "site", "options", "per_mode", "zip"}
    assert set(study.Study.model_fields) == set(settings.STUDY_SETTINGS) | own
    assert "inject_failure" not in study.Study.model_fields  # a test aid, command line only
    for s in settings.SETTINGS:
        if s.study:
            assert study.Study.model_fields[s.name].description == s.description
    assert set(settings.ZIPPABLE) <= {s.name for s in settings.SETTINGS if s.dimension}


def test_a_new_setting_becomes_an_option_a_spec_field_and_a_study_field(monkeypatch):
    new = settings.Setting("seeds", "count", (1,), "Random seeds, comma-separated.",
                           dimension=True, zippable=True, parse=settings.parse_int_list)
    monkeypatch.setattr(settings, "SETTINGS", (*settings.SETTINGS, new))
    from orchestrator.spec import schema as models

    assert ("seeds", str, "1", "Random seeds, comma-separated.") in settings.cli_parameters()
    _, field = models.study_fields()["seeds"]
    assert field.default == [1] and field.description == "Random seeds, comma-separated."
    assert new.from_cli("3,1,3") == (3, 1)
    with pytest.raises(UserError, match="--seeds: 'x' is not a whole number"):
        new.from_cli("1,x")


def test_run_fields_and_columns_are_declared_on_run():
    fields = set(Run.model_fields)
    for s in settings.SETTINGS:
        assert s.run_field is None or s.run_field in fields, s.name
    every, per_row = column_names(), column_names(iterations=True)
    assert every[0] == per_row[0] == "run_id"
    assert set(per_row) <= set(every) and set(every) - {"run_id"} <= fields
    assert "iters" in every and "iters" not in per_row  # a run's, not a row's
    assert "options" not in every  # the runs table writes options as JSON of its own


# --- one validate: the command line names the flag, a study file the line -------------------


def write(tmp_path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return study.load(str(path))


def test_a_study_option_applies_to_the_modes_that_have_it(tmp_path):
    ls = write(tmp_path, "name: s\nmodes: [torch-ddp, tf-ps]\nnodes: [1]\n"
               "options:\n  backend: [gloo]\n")
    runs = study.expand(ls, sitemod.load("local")[0])
    assert {r.mode: r.options.get("backend") for r in runs} == {"torch-ddp": "gloo",
                                                                "tf-ps": None}


@pytest.mark.parametrize(("text", "overrides", "message"), [
    ("name: s\nnodes: [1, 9]\n", {}, "s.yaml:2: nodes[1]: 9 nodes; partition 'local'"),
    ("name: s\nnodes: [1]\n", {"nodes": (9,)}, "--nodes 9: 9 nodes; partition 'local'"),
    ("name: s\nmodes: [tf-ps]\nper_mode:\n  tf-ps:\n    models: [lenet5, vgg]\n", {},
     "s.yaml:5: per_mode.tf-ps.models[1]: unknown model 'vgg'"),
    ("name: s\nmodes: [tf-ps]\noptions:\n  servers: [1, 0]\n", {},
     "s.yaml:4: options.servers[1]: mode 'tf-ps': servers=0 must be a whole number >= 1"),
    ("name: s\nmodes: [tf-ps]\n", {"options": {"servers": ("0",)}},
     "--option servers=0: mode 'tf-ps': servers=0 must be"),
    ("name: s\nlauncher: foo\n", {}, "s.yaml:2: launcher: 'foo' is not a launcher"),
])
def test_errors_are_located_where_the_value_was_given(tmp_path, text, overrides, message):
    ls = write(tmp_path, text)
    with pytest.raises(UserError) as info:
        study.expand(ls, sitemod.load("local")[0], overrides)
    assert message in str(info.value)
    assert str(info.value).startswith(str(ls.path))
