"""The model's own error on a site, learned from the scorecards of its earlier sweeps.

Why: a prediction's interval (orchestrator.perfmodel.interval) carries what its inputs are
known to (the network fit, the measured run's spread, its repeats), not how far the model
itself misses: a systematic miss (a pattern priced as a ring it is not) lands outside it. Each
site's scorecards measure that miss; recorded, the next sweep's intervals carry it.

Every time a sweep's scorecard is made (orchestrator.report.scorecard.scorecard_of_sweep), its
scored, valid predictions are appended to one file per site beside the pre-flight's cache
(netbench.store_dir: ``$ORCH_NETBENCH_DIR``, else ``~/.cache/orch/netbench``)::

    model-error-<site>.jsonl

one JSON object a line (run_id, site, partition, mode, workers, predicted and measured
``t_iter``, the signed relative error ``(predicted − measured) / measured``, when it was
predicted and when recorded), append-only. A prediction (its run id and the time it was
stated) is recorded once: scoring a sweep again adds nothing; the same configuration run
again in another sweep (the same run id, a new prediction) adds its new error. The ledger reads
the file when it states a prediction (:func:`model_error`). Deleting the file starts the site
over: no model-error term until :data:`~orchestrator.perfmodel.interval.MIN_SCORED`
predictions are scored again.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pandas as pd

from .. import files
from ..errors import UserError
from ..perfmodel import interval
from .netbench import store_dir

PREFIX = "model-error-"


def store_path(site: str, directory: Path | None = None) -> Path:
    """The site's file of recorded errors (a site name with a path separator or odd
    characters is written with ``_`` in their place)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", site) or "_"
    return (directory or store_dir()) / f"{PREFIX}{safe}.jsonl"


def _checked(line: str) -> dict:
    """One line's record, or ValueError saying which field is wrong."""
    rec = json.loads(line)
    if not isinstance(rec, dict):
        raise ValueError(f"got {rec!r}, expected an object")
    if not isinstance(rec.get("run_id"), str):
        raise ValueError(f"field 'run_id': got {rec.get('run_id')!r}, expected a run id")
    for field in ("predicted_at", "error_t_iter"):
        value = rec.get(field)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
                math.isfinite(value)):
            raise ValueError(f"field '{field}': got {value!r}, expected a finite number")
    return rec


def load(path: Path) -> list[dict]:
    """The recorded errors of a store file ([] where there is none), each prediction once;
    a damaged line is one UserError naming the file and line."""
    if not path.exists():
        return []
    out, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = _checked(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{number}: not valid JSON ({exc.msg}); the file is "
                            "append-only: remove the damaged line (or the file, to start "
                            "the site's model error over)") from None
        except ValueError as exc:
            raise UserError(f"{path}:{number}: {exc}; remove the damaged line (or the file, "
                            "to start the site's model error over)") from None
        key = (rec["run_id"], rec["predicted_at"])
        if key not in seen:
            seen.add(key)
            out.append(rec)
    return out


#: The scorecard's columns a recorded error keeps, and the names it keeps them under.
FIELDS = {"run_id": "run_id", "site": "site", "partition": "partition", "mode": "mode",
          "workers": "workers", "predicted_at": "predicted_at",
          "predicted_t_iter": "predicted_t_iter", "measured_t_iter": "measured_t_iter",
          "error_t_iter": "error_t_iter"}


def _plain(value):
    """A frame's cell as JSON takes it (numpy scalars as Python's, NaN as null)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def scored_records(frame: pd.DataFrame, now: float) -> list[dict]:
    """A scorecard's (report.scorecard.scorecard_frame) scored, valid predictions as records
    of the store: those with a site, a measured ``t_iter`` and an error, none flagged."""
    if frame is None or frame.empty or "site" not in frame.columns:
        return []
    keep = (frame["error_t_iter"].notna() & frame["measured_t_iter"].notna()
            & frame["site"].notna() & frame["valid"].eq(True))
    out = []
    for _, row in frame[keep].iterrows():
        rec = {name: _plain(row.get(column)) for name, column in FIELDS.items()}
        rec["recorded_at"] = now
        out.append(rec)
    return out


def record(frame: pd.DataFrame, directory: Path | None = None,
           now: float | None = None) -> dict[Path, int]:
    """Append a scorecard's scored, valid predictions to their sites' store files (each
    prediction once: those already there are left out); returns how many each file got."""
    now = time.time() if now is None else now
    by_site: dict[str, list[dict]] = {}
    for rec in scored_records(frame, now):
        by_site.setdefault(str(rec["site"]), []).append(rec)
    added: dict[Path, int] = {}
    for site, recs in by_site.items():
        path = store_path(site, directory)
        seen = {(r["run_id"], r["predicted_at"]) for r in load(path)}
        new = []
        for rec in recs:
            if (rec["run_id"], rec["predicted_at"]) not in seen:
                seen.add((rec["run_id"], rec["predicted_at"]))
                new.append(rec)
        if new:
            files.make_dirs(path.parent)
            files.append_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in new))
        added[path] = len(new)
    return added


def model_error(site: str, directory: Path | None = None, level: float = interval.LEVEL,
                ) -> tuple[interval.ModelError | None, str]:
    """The site's model error (None under MIN_SCORED recorded errors) and the basis its
    predictions record: ``N scored predictions in FILE``, or ``none yet`` with how many
    there are; a damaged store file gives no term, its error the basis (a cache never costs
    a sweep its predictions: the scorecard, which writes the file, names the line too)."""
    path = store_path(site, directory)
    try:
        recs = load(path)
    except UserError as exc:
        return None, f"none: {exc}"
    found = interval.model_error_of([r["error_t_iter"] for r in recs], str(path), level)
    if found is not None:
        return found, found.basis()
    have = f"{len(recs)} scored prediction(s) in {path}" if recs else f"no {path}"
    return None, f"{interval.NO_MODEL_ERROR} ({have}; {interval.MIN_SCORED} needed)"
