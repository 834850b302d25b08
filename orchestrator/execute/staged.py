"""A sweep in stages of increasing scale, each later run's prediction stated before it
is submitted (orchestrator/execute/ledger.py says why), and the pre-flight that gives the
predictions their network.

It sits above the runs it executes (the analysis layer: it reads results, the pre-flight and
the model), so the execution package below never imports it: the CLI hands the step between
scales to the staged strategy (strategies.Staged), which runs it.

What reads results or models (pandas, numpy: the ledger, the pre-flight, the model) is imported
where it is used: every sweep asks :func:`sweep_preflight` before it submits, and for a sweep
with nothing to predict that question must not cost a second of imports before its jobs are in
the queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import modes
from ..errors import FabricBelowMinimum, UserError
from ..site import Site
from ..spec.settings import PREFLIGHT_MODES

if TYPE_CHECKING:
    from .preflight import Preflight


def stating_predictions(networks: dict[str, Preflight], sweep_dir: Path,
                        say: Callable[[str], None] = lambda line: None,
                        ) -> Callable[[int, set[str]], None]:
    """The step between a staged sweep's scales (strategies.Staged): once the runs of
    ``ranks`` ranks have finished, state the predictions of the ``later`` runs, before any of
    them is submitted."""
    from .. import results
    from ..runs import rundir
    from . import ledger

    def between(ranks: int, later: set[str]) -> None:
        keys = results.recheck(sweep_dir)  # the run records first: merge only reads
        runs = results.merge(sweep_dir, keys)
        records, notes = ledger.predict_runs(
            runs, later, networks, iterations=sweep_dir / results.resultset.ITERATIONS)
        ledger.append(sweep_dir, records)
        for note in notes:
            say(f"not predicted: {note}")
        if records:
            say(f"predictions: {len(records)} run(s) at more than {ranks} rank(s) stated in "
                f"{sweep_dir / ledger.FILE} before they are submitted")
        for basis in dict.fromkeys(str(rec.get("model_error_basis")) for rec in records):
            say(f"model error in their intervals: {basis}")
        for reason, flagged in flag_groups(records):
            say(f"flagged ({len(flagged)} run(s)): {reason}: {', '.join(flagged)}")
        for rec in records:
            late = ledger.past_time_limit(rec, rundir.read_run(sweep_dir / rec["run_id"]))
            if late:
                say(f"warning: {late}")

    return between


def flag_groups(records: list[dict]) -> list[tuple[str, list[str]]]:
    """Each reason the predictions were flagged for, once, with the runs it covers (a sweep at
    more ranks than cores flags every larger run with the same words), in the order met."""
    groups: dict[str, list[str]] = {}
    for rec in records:
        for reason in rec.get("flags") or []:
            groups.setdefault(reason, []).append(f"{rec['run_id']} ({rec['workers']} ranks)")
    return list(groups.items())


def sweep_preflight(runs: list, site: Site, sweep_dir: Path, how: str, *, wait: bool,
                    say: Callable[[str], None], on_event: Callable | None = None,
                    ) -> dict[str, Preflight]:
    """The pre-flight of a sweep about to run, or {} with the reason said: nothing to predict
    (one scale only, no training mode with a modelled pattern), ``--no-wait`` (predictions
    need the smaller runs' results), or ``never``. A pre-flight that fails costs the
    predictions, never the sweep — except on a partition whose site declares ``min_busbw``
    and that the sweep spans nodes of: there the pre-flight runs whatever the scales, and a
    bus bandwidth below the minimum, or none measured, stops the sweep before its runs."""
    if how not in PREFLIGHT_MODES:
        raise UserError(f"--preflight {how}: valid: {', '.join(PREFLIGHT_MODES)}")
    gated = sorted({r.partition for r in runs if r.nodes > 1
                    and site.partition(r.partition).min_busbw is not None})
    if how != "never" and not gated and len({r.nodes * r.tasks_per_node for r in runs}) < 2:
        return {}  # one scale, no fabric to check: nothing to say, the model not even loaded
    from ..perfmodel import comm

    modelled = [r for r in runs if (m := modes.registry().get(r.mode)) is not None and m.trains
                and m.pattern in comm.PATTERN_MODELS]
    scales = {r.nodes * r.tasks_per_node for r in modelled}
    if how == "never":
        say("no pre-flight (--no-preflight): the sweep states no predictions and its report "
            "has no scorecard" + (f"; min_busbw of {', '.join(gated)} not checked"
                                  if gated else ""))
        return {}
    predict = len(scales) >= 2 and wait
    if len(scales) >= 2 and not wait:
        say("no pre-flight: predictions need the smaller runs' results (--no-wait); the "
            "report will have no scorecard" + (" (min_busbw still checked)" if gated else ""))
    partitions = sorted(({r.partition for r in modelled} if predict else set()) | set(gated))
    if not partitions:
        return {}  # nothing larger to predict, no fabric to check: no pre-flight needed
    from . import preflight as pre

    first = (modelled or runs)[0]
    try:
        networks = pre.preflight(site, partitions, sweep_dir, how=how, model=first.model,
                                 dataset=first.dataset, batch_size=first.batch_size, say=say,
                                 on_event=on_event, nodes=max(r.nodes for r in modelled or runs),
                                 counts={r.nodes for r in modelled} if predict else (),
                                 mpi=any(modes.get(r.mode).mpi for r in modelled))
    except Exception as exc:  # a failed pre-flight costs the predictions only
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        if gated:
            raise FabricBelowMinimum(
                f"pre-flight failed ({type(exc).__name__}: {first_line}): the fabric of "
                f"{', '.join(gated)} could not be checked against its site's min_busbw; the "
                "sweep stops before its runs") from None
        say(f"pre-flight failed ({type(exc).__name__}: {first_line}); the sweep goes on "
            "without predictions")
        return {}
    for line in pre.check_busbw(site, {p: networks[p] for p in gated}):
        say(f"pre-flight {line}")
    return networks if predict else {}
