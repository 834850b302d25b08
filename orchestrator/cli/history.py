"""``orch history`` (add, list, show), ``orch compare`` and ``orch check``: a results history,
two result sets compared with a statistical test, a sweep checked against references."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..history.settings import MAX_P, MIN_MAGNITUDE, MIN_SEGMENT
from ._common import group, warn

app = group("The results history: record gathered sweeps, list and show them; the schema "
            "of references.yaml.")

HistoryDir = Annotated[Path | None, typer.Option(
    "--history", help="The history's directory; default $ORCH_HISTORY, else "
    "~/.local/share/orch/history.")]


JUnit = Annotated[Path | None, typer.Option(
    "--junit", metavar="FILE", help="Also write a JUnit XML report (GitLab, Jenkins, GitHub "
    "Actions): one test case per configuration and metric.")]


def _root(history: Path | None) -> Path:
    from ..history import store

    return history.expanduser() if history is not None else store.default_root()


def _sweep_samples(directory: Path, with_provenance: bool = False, merged: bool = False):
    """A sweep directory's sample table (merged first, like orch results, unless ``merged``:
    its results/ were merged just now)."""
    from ..history import samples, store
    from .resultset import load_result_set

    runs, iters, sweep = load_result_set(directory / "results" if merged else directory)
    sweep = directory.resolve() if merged else sweep
    table = samples.samples(runs, iters)
    if with_provenance and sweep is not None:
        return store.with_provenance(table, sweep, runs)
    return _with_versions(table, runs)


def _with_versions(table, runs):
    """A sample table without provenance (a result set alone), its runs' versions and hosts
    still."""
    from ..history import store

    return store.with_run_facts(table, runs)


@app.command("add")
def add(sweep: Annotated[Path, typer.Argument(metavar="SWEEP", help="A gathered sweep "
                                              "directory.")],
        history: HistoryDir = None) -> None:
    """Record a sweep's results in the history (a new entry; nothing is rewritten)."""
    from ..history import store
    from ..runs import rundir

    root = _root(history)
    if not Path(sweep).is_dir() or not rundir.run_dirs(sweep):
        raise UserError(f"{sweep}: give a sweep directory (its runs' provenance is recorded "
                        "with the results)")
    entry = store.add(root, _sweep_samples(sweep, with_provenance=True), sweep.resolve())
    typer.echo(f"recorded {entry.id}: {entry.runs} run(s), {entry.configurations} "
               f"configuration(s) of {', '.join(entry.site)} in {root}")


def gathered(directory: Path) -> list[str]:
    """What ``orch gather`` and ``orch rerun`` say of a sweep just merged: recorded in the
    history its site config names, and each rerun inside or outside its original's spread."""
    import functools

    from ..history import gathered as gathered_module
    from ..history import samples, store
    from .resultset import load_result_set

    root = gathered_module.site_history(directory)
    originals = gathered_module.rerun_of(directory)
    if root is None and not originals:
        return []
    runs, iters, _ = load_result_set(directory / "results")  # merged just now: read once
    # The sample table is built once, and only where a line needs it: not for a sweep that
    # is not finished yet (record checks that first).
    sample_table = functools.cache(lambda: samples.samples(runs, iters))
    lines = []
    if root is not None:
        try:
            lines.append(gathered_module.record(root, lambda: store.with_provenance(
                sample_table(), directory.resolve(), runs), directory, runs))
        except OSError as exc:  # the merge is done and kept: say why, do not fail it
            lines.append(f"not recorded in history {root}: {exc.strerror or exc} "
                         f"({exc.filename or root}); orch history add {directory} --history "
                         f"{root} records it once that is fixed")
    if originals:
        table = _with_versions(sample_table(), runs)
        spread = store.select(root)[0] if root is not None and root.is_dir() else None
        for run_id, src in sorted(originals.items()):
            lines.append(_rerun_line(run_id, src, table[table["run_id"] == run_id], spread))
    return lines


def report_history(history: Path | None, references: Path | None, sweep: Path | None):
    """What ``orch report`` draws its history part from: ``--history``, else the history the
    site config names (a sweep directory's runs' provenance); None where neither names one
    (``--references`` alone: no trend to draw its band on)."""
    import time as time_module

    from ..history import gathered as gathered_module
    from ..history import references as refs_module
    from ..history import store
    from ..report.trend import History
    from ..runs import provenance, rundir

    root = history.expanduser() if history is not None else (
        gathered_module.site_history(sweep) if sweep is not None else None)
    if root is None:
        if references is not None:
            warn(f"--references {references}: no history named (--history, or history: in "
                 "the site config), so no trend to draw its band on")
        return None
    table, used, problems = store.select(root)
    for problem in problems:
        warn(problem)
    if table.empty:
        warn(f"history {root}: no recorded sweep yet, so no trend and no comparison")
        return None
    started = [float((provenance.read(r) or {}).get("prepared_at") or 0.0)
               for r in (rundir.run_dirs(sweep) if sweep is not None else [])]
    return History(table, used, min((t for t in started if t), default=time_module.time()),
                   str(sweep) if sweep is not None else None,
                   refs_module.load(references) if references is not None else None)


def _rerun_line(run_id: str, src: Path, rerun, spread=None) -> str:
    from ..history import gathered as gathered_module

    merged = src.parent / "results" / "runs.parquet"
    try:  # the original sweep as merged, when that holds the run; else merged now
        import pandas as pd

        ready = merged.is_file() and src.name in set(pd.read_parquet(merged, columns=[
            "run_id"])["run_id"])
        original = _sweep_samples(src.parent, merged=ready)
    except UserError as exc:
        return f"rerun of {run_id}: its original's results cannot be read ({exc})"
    return gathered_module.rerun_line(run_id, original[original["run_id"] == src.name], rerun,
                                      spread)


def _date(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(seconds))


@app.command("list")
def list_cmd(since: Annotated[str | None, typer.Option(help="Only sweeps measured within "
                                                       "this age: 30d, 12h, 2w.")] = None,
             site: Annotated[str | None, typer.Option(help="Only this site.")] = None,
             partition: Annotated[str | None, typer.Option(help="Only this partition.")] = None,
             mode: Annotated[str | None, typer.Option(help="Only this mode.")] = None,
             model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
             history: HistoryDir = None) -> None:
    """The recorded sweeps, oldest first: id, date measured, site, modes, models, runs."""
    from ..history import store

    root = _root(history)
    found, damaged = store.entries(root)
    if damaged:
        warn(f"{root}: {damaged} damaged record(s) skipped")
    age = store.parse_age(since) if since else None
    shown = [e for e in found if store.matches(e, age, site=site, partition=partition,
                                               mode=mode, model=model)]
    for e in shown:
        commit = ",".join(c[:8] for c in e.commits) or "-"
        typer.echo(f"{e.id}  {_date(e.measured_at)}  {','.join(e.site)}  "
                   f"{','.join(e.partition)}  {','.join(e.mode)}  {','.join(e.model)}  "
                   f"{e.runs} run(s)  orch {commit}")
    if not shown:
        typer.echo(f"no recorded sweep{' matches' if found else ''} in {root}")


@app.command("show")
def show(entry: Annotated[str, typer.Argument(help="An entry id (or a unique prefix of it).")],
         history: HistoryDir = None) -> None:
    """An entry: where it came from, orch commits, versions, and each configuration's
    trimmed-mean throughput and iteration time."""
    from ..history import samples, store
    from ..history.stats import Trimmed

    root = _root(history)
    found = [e for e in store.entries(root)[0] if e.id.startswith(entry)]
    if len(found) != 1:
        raise UserError(f"{entry}: {'no' if not found else 'more than one'} entry of {root} "
                        "has this id (orch history list)")
    e = found[0]
    table = store.load(root, e)
    if table is None:
        raise UserError(f"{root / e.file}: missing or damaged")
    typer.echo(f"entry     {e.id}\nsweep     {e.sweep}\nmeasured  {_date(e.measured_at)}\n"
               f"added     {_date(e.added_at)}\norch      {', '.join(e.commits) or '-'}")
    for name in ("versions", "image_digest"):
        values = sorted({v for v in table.get(name, []) if isinstance(v, str) and v})
        if values:
            typer.echo(f"{name:<9} " + "\n          ".join(values))
    keys = samples.key_columns(table)
    for values, g in table.groupby(keys, dropna=False):
        stats = [f"{m.label} {Trimmed.of(g[g['metric'] == m.name]['value']).mean:.6g} "
                 f"{m.unit}" for m in samples.METRICS[:2] if (g["metric"] == m.name).any()]
        typer.echo(f"  {_label(dict(zip(keys, values, strict=True)))}: {', '.join(stats)}")


@app.command("schema")
def schema() -> None:
    """The JSON schema of a site's references.yaml (orch check --references), from its
    pydantic model."""
    import json

    from ..history.references import References

    typer.echo(json.dumps(References.model_json_schema(), indent=2))


def _label(key: dict) -> str:
    from ..history.compare import label

    return label(key)


def _side(text: str, history: Path | None, named: bool = False):
    """A sweep directory's samples, or a history selection's (``history:KEY=VALUE,…``);
    ``named``: its name says which history (A and B read two)."""
    from ..history import store

    if Path(text).is_dir():
        return _sweep_samples(Path(text), with_provenance=True), text
    if not text.startswith(store.SELECTION):
        raise UserError(f"{text}: neither a sweep directory nor a history selection "
                        "(history:since=30d,site=…)")
    root = _root(history)
    table, used, problems = store.select(root, **store.parse_selection(text))
    for problem in problems:
        warn(problem)
    if table.empty:
        raise UserError(f"{text}: no recorded sweep matches in {root} (orch history list)")
    return table, f"{text} ({len(used)} sweep(s){f' of {root}' if named else ''})"


def _spread(a: str, b: str, history: Path | None):
    """The history whose runs give the run-to-run spread where A and B (two sweep
    directories) hold one run each of a configuration: --history, else the one B's site
    config names, else the default one; (None, "") where there is none."""
    if not (Path(a).is_dir() and Path(b).is_dir()):
        return None, ""
    from ..history import gathered, store  # a site's history: provenance, only here

    root = history.expanduser() if history is not None else (
        gathered.site_history(Path(b)) or store.default_root())
    if not root.is_dir():
        return None, ""
    table, used, problems = store.select(root)
    for problem in problems:
        warn(problem)
    return (table, f"history {root} ({len(used)} recorded sweep(s))") if len(used) else (
        None, "")


def compare_cmd(
    a: Annotated[str, typer.Argument(metavar="A", help="The reference: a sweep directory or "
                                     "a history selection (history:since=30d,mode=torch-ddp).")],
    b: Annotated[str, typer.Argument(metavar="B", help="Compared with A: a sweep directory or "
                                     "a history selection.")],
    history: Annotated[Path | None, typer.Option(
        "--history", help="The history of history: selections, and whose runs give the "
        "run-to-run spread where A and B hold one run each; default $ORCH_HISTORY, else "
        "~/.local/share/orch/history (for the spread: the history B's site config names "
        "first).")] = None,
    history_b: Annotated[Path | None, typer.Option(
        "--history-b", help="B's history, where B is a selection of another history than A's "
        "(two clusters, or a copy from before an update); default --history.")] = None,
    alpha: Annotated[float, typer.Option(min=0.0001, max=0.5, help="The chance of a false "
                                         "verdict per metric.")] = 0.05,
    min_change: Annotated[float, typer.Option(min=0.0, help="Smallest change (a fraction) "
                                              "reported as one.")] = 0.05,
    ignore_option: Annotated[list[str] | None, typer.Option(
        help="Match configurations without this mode option (repeatable).")] = None,
    detail: Annotated[bool, typer.Option(help="Every metric of every configuration.")] = False,
    fail_if_slower: Annotated[bool, typer.Option(help="Exit 1 when a configuration is "
                                                 "slower.")] = False,
) -> None:
    """Compare two result sets: per configuration in both, B/A of throughput, iteration time
    and each phase with a 95 % interval, a verdict and the phases that moved.

    Welch's t-test on 10 % trimmed means (docs/howto/compare.md).
    """
    from ..history import compare

    two = history_b is not None
    (ta, name_a), (tb, name_b) = _side(a, history, two), _side(b, history_b or history, two)
    spread, spread_from = _spread(a, b, history)
    found = compare.compare(ta, tb, alpha, min_change, tuple(ignore_option or ()), spread)
    if not found:
        raise UserError(f"no configuration is in both {name_a} and {name_b} (a mode option "
                        "that differs on purpose: --ignore-option NAME)")
    typer.echo(f"A: {name_a}\nB: {name_b}")
    if spread_from and any(c.primary and c.primary.spread_runs for c in found):
        typer.echo(f"run-to-run spread: {spread_from}")
    for line in compare.what_differs(ta, tb):
        typer.echo(f"differs: {line}")
    for c in found:
        typer.echo(compare.line(c))
        if detail:
            typer.echo("\n".join(compare.detail(c)))
    if fail_if_slower and any(c.verdict == "slower" for c in found):
        raise typer.Exit(1)


def check_cmd(
    sweep: Annotated[Path, typer.Argument(metavar="SWEEP", help="A sweep directory (or its "
                                          "results/).")],
    references: Annotated[Path, typer.Option("--references", help="The site's "
                                             "references.yaml.")],
    show_all: Annotated[bool, typer.Option("--all", help="Print the metrics that hold "
                                           "too.")] = False,
    junit: JUnit = None,
) -> None:
    """Check a sweep against a site's references: print every failing metric, exit 1 when
    any fails (0 when all hold)."""
    from ..history import junit as junit_module
    from ..history import references as refs_module
    from .resultset import load_result_set

    refs = refs_module.load(references)
    runs, _, _ = load_result_set(sweep)
    outcomes, unmatched = refs_module.check(refs, runs)
    for line in unmatched:
        warn(f"{references}: {line}")
    if junit is not None:
        junit_module.write(junit, f"orch check {sweep}",
                           refs_module.junit_cases(outcomes, runs, unmatched))
    failed = [o for o in outcomes if not o.ok]
    for o in outcomes if show_all else failed:
        typer.echo(o.line())
    typer.echo(f"{len(outcomes) - len(failed)} of {len(outcomes)} metric(s) hold"
               + (f", {len(failed)} fail" if failed else ""))
    if failed:
        raise typer.Exit(1)


@app.command("changes")
def changes_cmd(
    since: Annotated[str | None, typer.Option(help="Only sweeps measured within this age: "
                                              "30d, 12h, 2w.")] = None,
    site: Annotated[str | None, typer.Option(help="Only this site.")] = None,
    partition: Annotated[str | None, typer.Option(help="Only this partition.")] = None,
    mode: Annotated[str | None, typer.Option(help="Only this mode.")] = None,
    model: Annotated[str | None, typer.Option(help="Only this model.")] = None,
    history: HistoryDir = None,
    ignore_option: Annotated[list[str] | None, typer.Option(
        help="Match configurations without this mode option (repeatable); what changed "
        "still names it.")] = None,
    max_p: Annotated[float, typer.Option(min=1e-6, max=0.5, help="Largest p-value of a "
                                         "change point (Student's t-test of its sides).")
                     ] = MAX_P,
    min_magnitude: Annotated[float, typer.Option(min=0.0, help="Smallest shift (a fraction) "
                                                 "reported as a change point.")] = MIN_MAGNITUDE,
    min_segment: Annotated[int, typer.Option(min=2, help="Fewest entries a level holds on "
                                             "each side of a change point.")] = MIN_SEGMENT,
    all_metrics: Annotated[bool, typer.Option(
        "--all", help="Also the change points where only other metrics moved (a phase), "
        "not the throughput nor the iteration time.")] = False,
    fmt: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
    junit: JUnit = None,
    fail_if_slower: Annotated[bool, typer.Option(help="Exit 1 when a configuration's latest "
                                                 "change point made it slower.")] = False,
) -> None:
    """Change points of every configuration's metrics over the recorded sweeps: where a new
    level starts, by how much, the phases that moved and what changed at that entry.

    Apache Otava's method (E-divisive candidates, Student's t-test, p, magnitude and
    segment minimums): docs/howto/compare.md.
    """
    import json

    from ..history import changes, store
    from ..history.settings import Settings

    if fmt not in ("text", "json"):
        raise UserError(f"--format {fmt}: valid: text, json")
    root = _root(history)
    found, damaged = store.entries(root)
    if damaged:
        warn(f"{root}: {damaged} damaged record(s) skipped")
    age = store.parse_age(since) if since else None
    filters = {"site": site, "partition": partition, "mode": mode, "model": model}
    chosen = [e for e in found if store.matches(e, age, **filters)]
    levels, problems = changes.load_levels(root, chosen)
    for problem in problems:
        warn(problem)
    for column, value in filters.items():
        if value is not None and column in levels.columns:
            levels = levels[levels[column].astype(str) == value]
    settings = Settings(max_p, min_magnitude, min_segment)
    points, series = changes.find(levels, chosen, settings, tuple(ignore_option or ()),
                                  None if all_metrics else changes.PRIMARY)
    if fmt == "json":
        typer.echo(json.dumps(changes.report_json(root, chosen, settings, points, series),
                              indent=2, default=str))
    else:
        typer.echo("\n".join(changes.report_lines(root, chosen, settings, points, series)))
    if junit is not None:
        from ..history import junit as junit_module

        junit_module.write(junit, f"orch history changes {root}", changes.junit_cases(series))
    if fail_if_slower and changes.slower_now(series):
        raise typer.Exit(1)
