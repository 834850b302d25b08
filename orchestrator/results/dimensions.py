"""The PyTorch modes' run dimensions (precision, memory format, compile, pinned memory;
declared in :mod:`orchestrator.modes.torch_options`) as columns of the runs table.

A run at a dimension's default leaves it out of its ``options`` (its id stays what it was), so
the column takes the mode's default; a mode without the dimension gets None. Beside them, what
the ranks' footers say happened: the compile time and the dtype the forward computed in.
"""

from __future__ import annotations

from .. import modes
from ..modes.torch_options import COLUMNS
from ..protocol import RankLog
from ..spec.api import Run


def dimension_facts(run: Run, logs: list[RankLog]) -> dict:
    """The dimension columns of one run, and ``t_compile`` (the slowest rank's seconds, None
    without compilation) and ``activation_dtype`` (the ranks' logits dtype: ``bfloat16`` under
    bf16 autocast) from its footers."""
    declared = {o.name: o.default for o in modes.get(run.mode).options}
    out: dict = {name: run.options.get(name, declared[name]) if name in declared else None
                 for name in COLUMNS}
    footers = [log.footer for log in logs if log.footer]
    compile_s = [f["t_compile"] for f in footers if f.get("t_compile") is not None]
    out["t_compile"] = max(compile_s) if compile_s else None
    dtypes = sorted({f["activation_dtype"] for f in footers if f.get("activation_dtype")})
    out["activation_dtype"] = ",".join(dtypes) or None
    return out
