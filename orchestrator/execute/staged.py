"""A sweep run in stages of increasing scale, each later run's prediction stated before it
is submitted (orchestrator/predictions.py says why), and the pre-flight that gives the
predictions their network.

It sits above the runs it executes (the analysis layer: it reads results, the pre-flight and
the model), so the execution package below never imports it; the CLI hands the stage step to
the staged strategy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import modes, perfmodel, predictions, results
from ..errors import FabricBelowMinimum, UserError
from ..preflight import Preflight
from ..site import Site
from . import execute


def staged_execute(prepared: list, site: Site, sweep_dir: Path,
                   networks: dict[str, Preflight], *,
                   say: Callable[[str], None] = lambda line: None,
                   **execute_kwargs) -> None:
    """Execute the prepared runs stage by stage (by rank count, smallest first); after each
    stage, state the predictions of every later run before submitting it."""
    stages = sorted({p.run.nodes * p.run.tasks_per_node for p in prepared})
    for i, ranks in enumerate(stages):
        stage = [p for p in prepared if p.run.nodes * p.run.tasks_per_node == ranks]
        execute(stage, site, **execute_kwargs)
        later = {p.run.run_id for p in prepared
                 if p.run.nodes * p.run.tasks_per_node > ranks and p.action != "skip"}
        if not later or i == len(stages) - 1:
            continue
        results.recheck(sweep_dir)  # the run records first: merge only reads
        runs = results.merge(sweep_dir)
        records, notes = predictions.predict_runs(runs, later, networks)
        predictions.append(sweep_dir, records)
        for note in notes:
            say(f"not predicted: {note}")
        if records:
            say(f"predictions: {len(records)} run(s) at more than {ranks} rank(s) stated in "
                f"{sweep_dir / predictions.FILE} before they are submitted")


def sweep_preflight(runs: list, site: Site, sweep_dir: Path, how: str, *, wait: bool,
                    say: Callable[[str], None], on_event: Callable | None = None,
                    ) -> dict[str, Preflight]:
    """The pre-flight of a sweep about to run, or {} with the reason said: nothing to predict
    (one scale only, no training mode with a modelled pattern), ``--no-wait`` (predictions
    need the smaller runs' results), or ``never``. A pre-flight that fails costs the
    predictions, never the sweep — except on a partition whose site declares ``min_busbw``
    and that the sweep spans nodes of: there the pre-flight runs whatever the scales, and a
    bus bandwidth below the minimum, or none measured, stops the sweep before its runs."""
    from .. import preflight as pre

    if how not in pre.MODES:
        raise UserError(f"--preflight {how}: valid: {', '.join(pre.MODES)}")
    modelled = [r for r in runs if (m := modes.registry().get(r.mode)) is not None and m.trains
                and m.pattern in perfmodel.PATTERN_MODELS]
    scales = {r.nodes * r.tasks_per_node for r in modelled}
    gated = sorted({r.partition for r in runs if r.nodes > 1
                    and site.partition(r.partition).min_busbw is not None})
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
    first = (modelled or runs)[0]
    try:
        networks = pre.preflight(site, partitions, sweep_dir, how=how, model=first.model,
                                 dataset=first.dataset, say=say, on_event=on_event,
                                 nodes=max(r.nodes for r in modelled or runs))
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
