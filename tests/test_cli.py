"""The command line itself: every documented command is registered and has --help, help and
--version import no heavy library, and one vocabulary (--out, positional SWEEP) with the old
spellings still working behind one deprecation line.

No timings here: start-up time is measured by benchmarks/cli_startup.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import __version__
from orchestrator.cli import COMMANDS, app, load

from .conftest import ROOT, frozen_rank, orch, run_orch, wait_processes_gone, wait_until

README = ROOT / "README.md"
NAME = re.compile(r"^[a-z][a-z0-9-]*$")
HEAVY = ("pandas", "pyarrow", "numpy", "matplotlib", "submitit", "torch", "tensorflow",
         "mxnet", "yaml", "jinja2")


def _is_group(name: str) -> bool:
    return hasattr(load(next(e for e in COMMANDS if e.name == name)), "list_commands")


def readme_command_lines() -> list[str]:
    """Every ``orch ...`` command line of the README: in its ```sh blocks (comments cut) and in
    inline code spans, split at ';'."""
    text = README.read_text()
    lines = [line.split(" #", 1)[0] for block in re.findall(r"```sh\n(.*?)```", text, re.S)
             for line in block.splitlines()]
    lines += re.findall(r"`(orch [^`]+)`", text)
    return [part.strip() for line in lines for part in line.split(";")
            if part.strip().startswith("orch ")]


def readme_commands() -> list[tuple[str, ...]]:
    """(command,) or (group, subcommand) for every command the README shows. 'orch site list |
    show NAME | validate FILE' names three subcommands."""
    registered = {e.name for e in COMMANDS}
    found: dict[tuple[str, ...], None] = {}
    for line in readme_command_lines():
        first, *alternatives = line.split(" | ")
        words = first.split()
        if len(words) < 2 or not NAME.match(words[1]):
            continue
        command = words[1]
        found[(command,)] = None
        if command not in registered or not _is_group(command):
            continue  # an unregistered command fails test_every_documented_command_has_help
        subs = [words[2] if len(words) > 2 else ""] + [a.split()[0] for a in alternatives]
        for sub in subs:
            if NAME.match(sub):
                found[(command, sub)] = None
    return list(found)


DOCUMENTED = readme_commands()


def test_the_readme_parser_finds_the_commands():
    # A guard on the parser itself: these are in the README today.
    for path in [("sweep",), ("results",), ("site", "list"), ("site", "schema"),
                 ("env", "build"), ("data", "make"), ("container", "generate"), ("rerun",),
                 ("trace",)]:
        assert path in DOCUMENTED


@pytest.mark.parametrize("path", DOCUMENTED, ids=" ".join)
def test_every_documented_command_has_help(path):
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="orch")
    assert result.exit_code == 0, f"orch {' '.join(path)} --help: {result.output}"
    assert result.output.startswith(f"Usage: orch {' '.join(path)} ")


def test_every_registered_command_is_listed_by_orch_help_and_documented():
    proc = run_orch("--help", check=True)
    assert proc.stdout.startswith("Usage: orch ")
    listed = re.findall(r"^  (\S+)\s", proc.stdout.split("\nCommands:\n", 1)[1], re.M)
    assert listed == [e.name for e in COMMANDS]
    flat = re.sub(r"(\w-) (\w)", r"\1\2", " ".join(proc.stdout.split()))  # 'self- contained'
    documented = {path[0] for path in DOCUMENTED}
    for entry in COMMANDS:
        assert f"{entry.name} {entry.help}" in flat, entry.name
        assert entry.name in documented, f"orch {entry.name} is not in the README"


def test_the_listed_help_is_the_commands_own():
    # 'orch --help' prints the one-line help of the list without importing the commands: it
    # must say what the command's own help says.
    for entry in COMMANDS:
        command = load(entry)
        assert command.name == entry.name
        first = (command.help or "").strip().split("\n\n")[0]
        assert " ".join(first.split()) == entry.help, entry.name


def test_command_names_are_unique_and_every_group_has_subcommands():
    names = [e.name for e in COMMANDS]
    assert len(names) == len(set(names))
    for name in names:
        if _is_group(name):
            result = CliRunner().invoke(app, [name, "--help"], prog_name="orch")
            assert "Commands:" in result.output, name


def test_version():
    proc = run_orch("--version", check=True)
    assert proc.stdout == f"orch {__version__}\n" and proc.stderr == ""


def test_unknown_command_and_user_error_are_one_line():
    proc = run_orch("swep")
    assert proc.returncode == 2 and "No such command 'swep'" in proc.stderr
    assert "Did you mean 'sweep'" in proc.stderr
    proc = run_orch("sweep", "--nodes", "1,x")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["orch: error: --nodes: 'x' is not a whole number "
                                        "(in '1,x')"]


# --- import hygiene ------------------------------------------------------------------------

HYGIENE = """
import contextlib, io, json, sys
import orchestrator.cli as cli
for args in ARGS:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            cli.app(args, prog_name="orch")
        except SystemExit as exc:
            assert exc.code in (0, None), (args, exc.code)
    assert out.getvalue().startswith(("Usage: orch", "orch ")), (args, out.getvalue())
print(json.dumps(sorted(sys.modules)))
"""


def loaded_modules(args: list[list[str]]) -> list[str]:
    """sys.modules of a fresh interpreter after ``orch ARGS`` for each ARGS."""
    code = HYGIENE.replace("ARGS", repr(args))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=os.environ, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def heavy(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def test_orch_help_and_version_import_nothing_heavy():
    modules = loaded_modules([["--help"], ["--version"]])
    assert heavy(modules) == []
    # Not even one command module, nor another orch module (their pydantic models); the
    # signal handling every command runs under is the standard library's.
    assert sorted(m for m in modules if m.startswith("orchestrator")) == [
        "orchestrator", "orchestrator.cli", "orchestrator.cli._common", "orchestrator.errors",
        "orchestrator.runs", "orchestrator.runs.stopping"]


def test_every_commands_help_imports_nothing_heavy():
    paths = [[*path, "--help"] for path in DOCUMENTED]
    modules = loaded_modules(paths)
    assert heavy(modules) == []
    # Command modules import other orch modules only inside the commands, besides the sweep
    # settings' declarations (plain dataclasses, no third-party import) that orch sweep's
    # options are built from, and orch history changes' (the same, for its defaults).
    assert [m for m in modules if m.startswith("orchestrator.")
            and not m.startswith("orchestrator.cli") and m not in LIGHT] == []
    assert heavy(settings_imports()) == [] and "pydantic" not in settings_imports()


# The orch modules a command module may import at its top: nothing beyond the standard library.
# protocol: stdlib only (a rank's contract); the settings take the rank arguments' defaults
# from it.
LIGHT = ("orchestrator.errors", "orchestrator.spec", "orchestrator.spec.settings",
         "orchestrator.history", "orchestrator.history.settings",
         "orchestrator.runs", "orchestrator.runs.stopping", "orchestrator.protocol")


def settings_imports() -> list[str]:
    """The top-level packages importing the sweep settings' declarations loads."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys; before = set(sys.modules); "
                           "import orchestrator.spec.settings; print(json.dumps(sorted("
                           "{m.split('.')[0] for m in set(sys.modules) - before})))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


# --- one vocabulary: --out (-o), positional SWEEP; --output and --dir deprecated -------------


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("orch: warning:")]


@pytest.fixture
def fake_trace_run(tmp_path):
    """A sweep directory with one run that has a layer-wise trace (trace needs nothing else)."""
    sweep = tmp_path / "sweep"
    ranks = sweep / "run-a" / "ranks"
    ranks.mkdir(parents=True)
    (sweep / "run-a" / "run.json").write_text("{}\n")
    (ranks / "trace.csv").write_text("id,name,forward_us,backward_us,comm_us,size_bytes\n"
                                     "0,data,10,0,0,0\n1,fc,1,2,3,40\n")
    return sweep, "run-a"


def test_trace_new_spellings(fake_trace_run, tmp_path):
    sweep, run_id = fake_trace_run
    proc = run_orch("trace", run_id, sweep, check=True)
    assert proc.stdout.startswith("id,name,") and warnings_of(proc.stderr) == []
    for flag in ("--out", "-o"):
        target = tmp_path / f"copy{flag}.csv"
        proc = run_orch("trace", run_id, sweep, flag, target, check=True)
        assert target.read_text() == (sweep / run_id / "ranks/trace.csv").read_text()
        assert warnings_of(proc.stderr) == []


def test_trace_old_spellings_warn_once_each(fake_trace_run, tmp_path):
    sweep, run_id = fake_trace_run
    target = tmp_path / "old.csv"
    proc = run_orch("trace", run_id, "--dir", sweep, "--output", target, check=True)
    assert target.read_text() == (sweep / run_id / "ranks/trace.csv").read_text()
    assert warnings_of(proc.stderr) == [
        "orch: warning: --output is deprecated; use --out",
        "orch: warning: --dir is deprecated; use orch trace RUN_ID SWEEP"]
    proc = run_orch("trace", run_id, "--dir", sweep, check=True)
    assert warnings_of(proc.stderr) == [
        "orch: warning: --dir is deprecated; use orch trace RUN_ID SWEEP"]
    assert proc.stdout == (sweep / run_id / "ranks/trace.csv").read_text()


def test_old_and_new_spelling_together_must_agree(fake_trace_run, tmp_path):
    sweep, run_id = fake_trace_run
    proc = run_orch("trace", run_id, sweep, "--dir", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (f"orch: error: --dir {tmp_path} and SWEEP {sweep}: "
                                            "give only SWEEP")
    proc = run_orch("trace", run_id, sweep, "--dir", sweep, check=True)  # the same: fine
    assert len(warnings_of(proc.stderr)) == 1


@pytest.mark.parametrize("args,warning", [
    (["results", "NOSWEEP", "--output", "x.csv"], "--output is deprecated; use --out"),
    (["export", "NOSWEEP", "--output", "x.csv"], "--output is deprecated; use --out"),
    (["show", "run-a", "--dir", "NOSWEEP"], "--dir is deprecated; use orch show RUN_ID SWEEP"),
    (["rerun", "run-a", "--dir", "NOSWEEP"], "--dir is deprecated; use orch rerun RUN_ID SWEEP"),
], ids=["results --output", "export --output", "show --dir", "rerun --dir"])
def test_deprecated_spellings_still_parse(tmp_path, args, warning):
    args = [str(tmp_path / "missing") if a == "NOSWEEP" else a for a in args]
    proc = run_orch(*args)
    # Accepted (not a usage error), one warning, then the command's own error: no such sweep.
    assert proc.returncode == 2 and "No such option" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == f"orch: warning: {warning}" and len(lines) == 2
    assert lines[1].startswith("orch: error: ") and "missing" in lines[1]


def test_deprecated_spellings_are_hidden_from_help():
    for path in (["results"], ["export"], ["trace"], ["show"], ["rerun"]):
        result = CliRunner().invoke(app, [*path, "--help"], prog_name="orch")
        assert "--output" not in result.output and "--dir" not in result.output
        assert "SWEEP" in result.output


def test_every_output_option_is_out_with_short_o():
    # The vocabulary, checked on the built commands: no --output anywhere visible, and --out
    # has -o wherever -o is free (orch sweep uses -o for --option).
    for entry in COMMANDS:
        command = load(entry)
        subs = list(command.commands.values()) if hasattr(command, "commands") else [command]
        for sub in subs:
            for param in sub.params:
                opts = [*param.opts, *param.secondary_opts]
                if "--output" in opts or "--dir" in opts:
                    assert param.hidden, f"{entry.name} {sub.name}: {opts}"
                if "--out" in opts and entry.name != "sweep":
                    assert "-o" in opts, f"{entry.name} {sub.name}: {opts}"


def test_sweep_minus_o_is_option_and_says_so(tmp_path):
    proc = run_orch("sweep", "-o", tmp_path / "runs", "--dry-run")
    assert proc.returncode == 2
    assert "-o is --option in orch sweep; the sweep directory is --out DIR" in proc.stderr


@pytest.mark.ranks
def test_new_and_old_spellings_on_a_real_run(tmp_path):
    sweep = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "1", "--iters", 2, "--warmup", 0, "--out", sweep, check=True)
    run_id = next(p.name for p in sweep.iterdir() if p.name.startswith("torch-ddp"))
    new = run_orch("results", sweep, "-f", "json", "-o", tmp_path / "new.json", check=True)
    old = run_orch("results", sweep, "-f", "json", "--output", tmp_path / "old.json",
                   check=True)
    assert warnings_of(new.stderr) == []
    assert warnings_of(old.stderr) == ["orch: warning: --output is deprecated; use --out"]
    [rec] = json.loads((tmp_path / "new.json").read_text())
    assert rec["run_id"] == run_id and rec["state"] == "COMPLETED"
    assert (tmp_path / "new.json").read_text() == (tmp_path / "old.json").read_text()
    run_orch("export", sweep, "--out", tmp_path / "runs.parquet", check=True)
    assert (tmp_path / "runs.parquet").stat().st_size > 0
    shown = run_orch("show", run_id, sweep, "--json", check=True)
    shown_old = run_orch("show", run_id, "--dir", sweep, "--json", check=True)
    assert warnings_of(shown.stderr) == [] and len(warnings_of(shown_old.stderr)) == 1
    assert json.loads(shown.stdout)["provenance"] == json.loads(shown_old.stdout)["provenance"]
    proc = run_orch("trace", run_id, sweep)
    assert proc.returncode == 2 and "--option trace=yes" in proc.stderr


# Ctrl-C, SIGTERM and SIGHUP on orch sweep: the jobs still running are named (or cancelled),
# the ledger and the sweep's log say so, exit 128 + the signal. The signal is sent once the
# sweep surely waits: its one run's rank has frozen itself (--inject-failure RANK@ITER:stop, no
# hang timeout), and stays frozen until the test or orch ends it.

def _signals_default() -> None:
    """orch starts with the default action of each signal it handles, as in a terminal: a
    test suite started in the background (``make test &``, nohup) has SIGINT (and SIGHUP)
    ignored, every child inherits that, and orch then rightly leaves them ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _start_and_stop(site: str, out: Path, signum: int, frozen, *extra: str
                    ) -> tuple[int, str, Path]:
    """orch sweep of one run that cannot end by itself, ``signum`` to orch alone once
    ``frozen(out)`` (its rank has stopped itself); (exit code, stderr, run directory). Output
    goes to files, not pipes: the test waits for orch to exit, not for every process that may
    have inherited a pipe to close it."""
    err_file = out.parent / f"{out.name}.stderr"
    with open(err_file, "w") as err_fh:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "--site", site,
                                 "--nodes", "1", "--iters", "100000", "--warmup", "1",
                                 "--inject-failure", "0@2:stop", "--hang-timeout", "0",
                                 "--no-preflight", "--out", str(out), *extra], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err_fh, text=True,
                                preexec_fn=_signals_default)
    try:
        wait_until("the run's rank to freeze", lambda: frozen(out), timeout=300, proc=proc,
                   every=0.5)
        rdir = next(p for p in out.iterdir() if (p / "job.json").exists())
        proc.send_signal(signum)  # to orch only, as kill PID or systemd sends it
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # say where orch is stuck: its threads' stacks
            proc.send_signal(signal.SIGUSR1)
            time.sleep(3)  # only the failure's report waits: for the stacks to be written
            pytest.fail(f"orch did not exit within 120 s of {signum!r}; its stderr and "
                        "stacks:\n" + err_file.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err_file.read_text(), rdir


def _slurm_job_frozen(out: Path):
    """The job runs on the cluster and its rank has frozen itself there (this machine)."""
    if not out.exists():
        return None
    rdirs = [p for p in out.iterdir() if (p / "job.json").exists()]
    return rdirs and '"RUNNING"' in (rdirs[0] / "job.json").read_text() and frozen_rank(out, 0)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stopped_local_sweep_cancels_its_run_and_says_so(tmp_path, signum, code):
    """On the local site a stopped orch cancels its run (backends/local.py says why): the
    ranks are gone, the ledger says CANCELLED by orch stopped by the signal, the sweep's log
    holds what stderr said, and the next sweep into the directory would submit it again."""
    from orchestrator import execute
    from orchestrator import site as sitemod
    from orchestrator.runs import rundir

    out = tmp_path / "stopped"
    name = signal.Signals(signum).name
    code_seen, err, rdir = _start_and_stop("local", out, signum,
                                           lambda d: frozen_rank(d, 0))
    assert code_seen == code, err
    assert f"orch sweep stopped by {name}" in err and "Traceback" not in err, err
    assert f"cancelled 1 job(s): {rdir.name}" in err, err
    wait_processes_gone(rdir.name)
    record = rundir.read_record(rdir)
    assert (record.state, record.cancel_requested) == ("CANCELLED", f"orch stopped by {name}")
    assert record.reason.startswith(f"cancelled by orch: orch stopped by {name}; the next "
                                    "orch sweep into this directory submits it again")
    log = (out / "sweep.log").read_text()
    for line in (f"orch sweep stopped by {name}", f"cancelled 1 job(s): {rdir.name}",
                 f"{rdir.name} job {record.job_id} RUNNING", "orch sweep started"):
        assert line in log, log
    status, shown, problem = orch("status", out)
    assert status == 0 and "CANCELLED" in shown and f"orch stopped by {name}" in shown, problem
    prepared = execute.prepare([rundir.read_run(rdir)], sitemod.load("local")[0], out)
    assert prepared[0].action == "submit" and prepared[0].record.attempt == 2


@pytest.mark.slurm
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                              (signal.SIGHUP, 129)])
def test_stopped_sweep_names_running_slurm_jobs_and_leaves_them(slurm_cluster, tmp_path,
                                                                 signum, code):
    """On Slurm the jobs go on: they are named with the commands to follow or cancel them,
    and each one's ledger notes that orch stopped (orch status shows it beside RUNNING)."""
    out = tmp_path / "intr"
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    try:
        got, err, rdir = _start_and_stop(slurm_cluster, out, signum, _slurm_job_frozen)
        job = json.loads((rdir / "job.json").read_text())["job_id"]
        assert got == code, err
        flat = err.replace("\n", " ")
        assert f"1 job(s) still running: {rdir.name} (job {job})" in flat, err
        assert f"orch cancel {out}" in flat and "Traceback" not in err
        assert f"orch sweep stopped by {name}" in (out / "sweep.log").read_text()
        status = run_orch("status", out, check=True).stdout
        assert "RUNNING" in status and f"orch stopped by {name}" in status, status
    finally:
        run_orch("cancel", out)


@pytest.mark.slurm
def test_ctrl_c_with_cancel_on_interrupt_cancels(slurm_cluster, tmp_path):
    out = tmp_path / "intr2"
    try:
        code, err, rdir = _start_and_stop(slurm_cluster, out, signal.SIGINT, _slurm_job_frozen,
                                          "--cancel-on-interrupt")
        assert code == 130 and "cancelled 1 job(s)" in err, err
        record = json.loads((rdir / "job.json").read_text())
        assert record["state"] == "CANCELLED"
        assert record["cancel_requested"] == "orch stopped by Ctrl-C"
    finally:
        run_orch("cancel", out)


def test_gather_stopped_by_sigterm_says_so(tmp_path, finished_sweep):
    """Every command stops on SIGTERM as on Ctrl-C, with 143 and a line, never a traceback
    or click's 'Aborted!'. orch gather is signalled while it surely waits: reading a rank
    log that is a pipe nobody writes to (the test holds its writing end open)."""
    import shutil
    import threading

    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    log = next(out.glob("*/ranks/rank-0.jsonl"))
    log.unlink()
    os.mkfifo(log)
    opened = []
    writer = threading.Thread(target=lambda: opened.append(open(log, "wb")),  # noqa: SIM115
                              daemon=True)
    writer.start()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "gather", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_signals_default)
    try:
        writer.join(timeout=300)  # returns once orch opened the pipe: it now waits to read
        assert opened, "orch gather never opened the rank log"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        for fh in opened:
            fh.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "orch gather stopped by SIGTERM" in err and "Traceback" not in err, err
    assert "Aborted" not in err


def test_every_command_has_examples_of_itself():
    """The command reference shows an example of every command (tests/test_docs_commands.py
    runs each against the CLI once it is in docs/reference/cli.md)."""
    for entry in COMMANDS:
        assert entry.examples, entry.name
        for command, what in entry.examples:
            assert command.startswith(f"orch {entry.name}") and what, (entry.name, command)
        assert all(code not in (0, 2) for code, _ in entry.exits), entry.name


def test_a_reason_with_brackets_is_printed_as_written(capsys):
    """A failed run's reason quotes a rank's error, brackets included (Gloo's
    '[/__w/pytorch/.../pair.cc:152]'); printing it must neither fail nor drop them."""
    from types import SimpleNamespace

    from orchestrator.cli import _common

    reason = ("rank 0: RuntimeError: Gloo connectFullMesh failed with "
              "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out")
    _common.print_event(SimpleNamespace(run_id="r-[1]"),
                        SimpleNamespace(state="FAILED", job_id="7", reason=reason))
    err = " ".join(capsys.readouterr().err.split())
    assert "r-[1] job 7 FAILED: rank 0: RuntimeError" in err
    assert "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152]" in err
