"""Benchmark figures are data: each benchmark writes its result as a file under
benchmarks/results/, the files are valid and never overwritten, and docs/benchmarks.md is
rendered from them, latest first, and is current."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import page, record
from tests.conftest import run_orch

ROOT = Path(__file__).resolve().parents[1]
# Modules of benchmarks/ that are not benchmarks: the writer, the page, the native twins.
NOT_BENCHMARKS = {"__init__", "record", "page"}


def test_benchmarks_page_is_current():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.page", "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_every_result_file_is_valid():
    by_name = record.load_all()
    assert {"fidelity", "gpu-check", "merge_speed"} <= set(by_name)
    for name in by_name:
        assert (record.RESULTS / name / "about.md").is_file(), name
    assert all(r.benchmark == name for name, rs in by_name.items() for r in rs)


def _calls_record_write(path: Path) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "write" and isinstance(n.func.value, ast.Name)
               and n.func.value.id == "record" for n in ast.walk(ast.parse(path.read_text())))


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                                          if p.stem not in NOT_BENCHMARKS))
def test_each_benchmark_writes_its_result(module):
    path = ROOT / "benchmarks" / f"{module}.py"
    assert _calls_record_write(path), (
        f"benchmarks/{module}.py does not write its result: end its main() with "
        f"record.write({module!r}, summary, figures) (benchmarks/record.py)")


def test_a_result_is_never_overwritten(tmp_path):
    first = record.write("demo", "1.00 s", {"s": 1.0}, root=tmp_path)
    second = record.write("demo", "2.00 s", {"s": 2.0}, root=tmp_path)
    assert first != second and second.name.endswith("-2.json")
    assert json.loads(first.read_text())["figures"] == {"s": 1.0}
    saved = record.Result.model_validate_json(second.read_text())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT).stdout.strip()
    assert saved.commit == head and saved.command.startswith("python -m benchmarks.demo")
    # Latest first: of one day and commit, the later file.
    assert [r.summary for r in record.load_all(tmp_path)["demo"]] == ["2.00 s", "1.00 s"]


def test_page_lists_runs_latest_first(tmp_path):
    (tmp_path / "machines.json").write_text('{"m": "a machine"}')
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "about.md").write_text("## Demo\n\nWhat it measures.")
    for day, commit, summary in [("2026-01-02", "bbb", "second"), ("2026-01-01", None, "first"),
                                 ("2026-01-03", "ccc", "third")]:
        record.save(record.Result(benchmark="demo", date=day, commit=commit, machine="m",
                                  command="python -m benchmarks.demo", summary=summary),
                    tmp_path)
    text = page.render(tmp_path)
    assert text.index("| third |") < text.index("| second |") < text.index("| first |")
    assert "| 2026-01-01 | — | m |" in text and "## Demo" in text


def test_a_bad_result_file_names_itself(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "2026-01-01-x.json").write_text('{"benchmark": "demo"}')
    with pytest.raises(SystemExit, match=r"2026-01-01-x\.json: not a benchmark result"):
        record.load_all(tmp_path)


def test_gpu_check_output_as_a_result(tmp_path):
    """scripts/gpu-check's output folder, as it comes back from an H200 (the recorded runs of
    tests/fixtures/gpu-h200-dims, merged here by orch results as gpu-check merges them)."""
    out = tmp_path / "gpu-check"
    shutil.copytree(ROOT / "tests" / "fixtures" / "gpu-h200-dims", out)
    proc = run_orch("results", out, "--format", "json", check=True)
    (out / "results.json").write_text(proc.stdout)
    result = record.gpu_check_result(out)
    assert (result.date, result.machine) == ("2026-11-26", "H200")  # machines.json's name
    table = result.tables[0]
    assert {"precision", "memory_format", "samples_per_s"} <= set(table.columns)
    assert len(table.rows) == result.figures["runs"] == 14
    assert result.figures["completed"] == 14
    nhwc = [row for row in table.rows if "nhwc" in row and "bf16" in row and "resnet50" in row]
    assert nhwc and all(row[table.columns.index("samples_per_s")] for row in nhwc)


def test_record_cli_refuses_a_folder_without_gpu_check_output(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.record", "gpu-check", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "no machine.txt, results.json: give scripts/gpu-check's $OUT" in proc.stderr


def test_every_machine_is_described():
    """Each result's machine has a row of machines.json (the page lists an undescribed one as
    recorded, but says nothing of it)."""
    machines = json.loads((record.RESULTS / "machines.json").read_text())
    named = {r.machine for rs in record.load_all().values() for r in rs}
    assert sorted(named - set(machines)) == []


def test_scratch_paths_are_not_shown():
    assert page.shown_command("python -m benchmarks.fidelity --out /tmp/ti/fid2 --rounds 3 "
                              "--record-to=/root/out/results --from-log tests/x.log") == (
        "python -m benchmarks.fidelity --out DIR --rounds 3 --record-to=DIR "
        "--from-log tests/x.log")
    assert "/tmp/" not in page.render() and "/root/" not in page.render()
