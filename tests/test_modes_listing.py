"""``orch modes`` and the modes tables the docs hold: both come from the modes' descriptors, so
every mode folder is listed with its framework environment, launchers and options."""

from __future__ import annotations

import json

from orchestrator import modes
from orchestrator.modes import catalogue

from .conftest import orch


def test_json_lists_every_mode_as_its_descriptor_says():
    code, out, err = orch("modes", "--format", "json")
    assert code == 0, err
    listed = {r["name"]: r for r in json.loads(out)}
    assert list(listed) == list(modes.registry())
    for name, mode in modes.registry().items():
        record = listed[name]
        assert record["framework_env"] == mode.framework
        assert record["launchers"] == list(mode.launchers)
        assert [o["name"] for o in record["options"]] == [o.name for o in mode.options]
    ssgd = {o["name"]: o for o in listed["mpi-ssgd"]["options"]}
    assert ssgd["overlap"]["choices"] == ["none", "wfbp"]
    assert ssgd["bucket_size"]["minimum"] == 1 and ssgd["overlap"]["minimum"] is None


def test_one_mode_in_full_and_an_unknown_one():
    code, out, _ = orch("modes", "mpi-ssgd")
    assert code == 0
    assert out.startswith("mpi-ssgd: reference S-SGD over mpi4py")
    assert "bucket_size" in out and "N >= 1 (26214400)" in out and "torch-mpi" in out
    code, _, err = orch("modes", "torch-dpp")
    assert code == 2 and err.startswith("orch: error: unknown mode 'torch-dpp'; valid: ")


def test_shared_options_are_listed_once_with_their_modes():
    shared = {o.name: names for o, names in catalogue.shared_options()
              if "torch-ddp" in names}
    assert shared["precision"] == ["horovod", "mpi-ssgd", "torch-ddp", "torch-fsdp"]
    assert shared["backend"] == ["allreduce-bench", "torch-ddp", "torch-fsdp"]
    table = catalogue.modes_table()
    ddp = next(line for line in table.splitlines() if line.startswith("| `torch-ddp`"))
    assert "`trace`=no\\|yes (no)" in ddp  # its own options in full
    assert "shared: `backend`, `precision`" in ddp
    assert "`precision`=" not in ddp and "`backend`=" not in ddp


def test_values_text():
    option = modes.Option("x", choices=("a", "b"), default="b")
    assert catalogue.values_text(option) == "a|b (b)"
    assert catalogue.values_text(modes.Option("n", default="3", minimum=0)) == "N >= 0 (3)"
    assert catalogue.values_text(modes.Option("c", choices=("a", "b"))) == "a|b (default: see what)"
