"""How long ``orch`` takes to start: ``orch --help``, ``orch --version`` and ``orch sweep --help``
as whole processes (target: help and version <= 0.3 s).

Each command runs as a fresh ``python -m orchestrator`` process, timed from outside (start to
exit, interpreter start-up included), next to a bare ``python -c pass`` (what no Python
program can go below) and, where git can still produce it, the same command on the CLI before
it became a lazily loaded package (``--before REV``; default: the parent of the commit that
removed orchestrator/cli.py). Runs alternate between all variants, so drift on a shared
machine hits each alike; reported: min, median and max wall seconds, the median CPU seconds
(user + system: less inflated by a busy machine) and median ratios.

Run: ``.venv/bin/python -m benchmarks.cli_startup [--runs 15] [--before REV]``.
Where the time goes: ``python -X importtime -m orchestrator --help 2> imports.txt``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import record

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.3
COMMANDS = (("--help",), ("--version",), ("sweep", "--help"))


def before_tree(rev: str | None, dest: Path) -> tuple[str, Path] | None:
    """The orchestrator package at ``rev`` (default: just before orchestrator/cli.py was
    removed) unpacked into ``dest``; None where git cannot give it."""
    git = ["git", "-C", str(ROOT)]
    try:
        if rev is None:
            removed = subprocess.run([*git, "log", "-1", "--format=%H", "--diff-filter=D",
                                      "HEAD", "--", "orchestrator/cli.py"], capture_output=True,
                                     text=True, check=True).stdout.strip()
            if not removed:
                return None
            rev = f"{removed}^"
        sha = subprocess.run([*git, "rev-parse", "--short", rev], capture_output=True,
                             text=True, check=True).stdout.strip()
        archive = subprocess.run([*git, "archive", sha, "orchestrator"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha, dest


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, cpu) seconds of one process: cpu = its user + system time, which a busy
    machine inflates much less than wall time."""
    c0, t0 = _cpu_children(), time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                          cwd=cwd)
    elapsed, cpu = time.perf_counter() - t0, _cpu_children() - c0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each (after one "
                        "untimed warm-up run)")
    parser.add_argument("--before", default=None, help="git revision of the CLI to compare "
                        "with (default: before the lazy CLI package)")
    parser.add_argument("--no-before", action="store_true", help="time the current CLI only")
    a = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cwd = tmp_path / "cwd"  # neutral: no orchestrator/ next to the process
        cwd.mkdir()
        trees = {"now": ROOT}
        old = None if a.no_before else before_tree(a.before, tmp_path)
        if old is not None:
            trees[f"before ({old[0]})"] = old[1]
        # Compiled bytecode for every variant alike (as an installed orch has it), kept out of
        # the checkout: written by the warm-up run, whatever PYTHONDONTWRITEBYTECODE says.
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        base_env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "pycache")
        variants: list[tuple[str, str, list[str], dict[str, str]]] = [
            ("python -c pass", "", [sys.executable, "-c", "pass"], base_env)]
        for label, tree in trees.items():
            env = {**base_env, "PYTHONPATH": str(tree)}
            for args in COMMANDS:
                variants.append((f"orch {' '.join(args)}", label,
                                 [sys.executable, "-m", "orchestrator", *args], env))
        times: dict[int, list[float]] = {i: [] for i in range(len(variants))}
        cpus: dict[int, list[float]] = {i: [] for i in range(len(variants))}
        for _, _, argv, env in variants:  # warm-up: page cache, .pyc files
            time_once(argv, env, cwd)
        for _ in range(a.runs):
            for i, (_, _, argv, env) in enumerate(variants):
                wall, cpu = time_once(argv, env, cwd)
                times[i].append(wall)
                cpus[i].append(cpu)

    med = {i: statistics.median(t) for i, t in times.items()}
    base = med[0]
    by_key = {(v[0], v[1]): i for i, v in enumerate(variants)}
    before_label = next((k for k in trees if k != "now"), None)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{a.runs} alternated runs of each, whole processes, seconds "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} cores, load {load:.1f})")
    head = (f"{'command':22}{'cli':20}{'min':>8}{'median':>8}{'max':>8}{'- python':>10}"
            f"{'cpu':>8}")
    head += f"{'before/now':>12}" if before_label else ""
    print(head)
    for i, (name, label, _, _) in enumerate(variants):
        t = times[i]
        row = (f"{name:22}{label:20}{min(t):8.3f}{med[i]:8.3f}{max(t):8.3f}"
               f"{med[i] - base if i else 0.0:10.3f}{statistics.median(cpus[i]):8.3f}")
        if before_label and label == "now":
            row += f"{med[by_key[(name, before_label)]] / med[i]:11.1f}x"
        print(row)
    for args in COMMANDS[:2]:
        m = med[by_key[(f"orch {' '.join(args)}", "now")]]
        print(f"orch {' '.join(args)}: median {m:.3f} s wall (target <= {TARGET_S} s: "
              f"{'met' if m <= TARGET_S else 'NOT met'})")
    print("wall: start to exit, median; cpu: user + system, median; '- python': median wall "
          "minus python -c pass; before/now: median wall ratio")
    now = {name: round(med[i], 3) for i, (name, label, _, _) in enumerate(variants)
           if label == "now"}
    record.write("cli_startup", "; ".join(f"{k} {v:.2f} s" for k, v in now.items())
                 + f" median wall at load {load:.1f} (target ≤ {TARGET_S} s)",
                 {"median_wall_s": now, "python_pass_s": round(base, 3), "load": round(load, 2),
                  "runs": a.runs})


if __name__ == "__main__":
    main()
