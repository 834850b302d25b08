"""Report: from a result set to answers. Pure functions: DataFrames in, tables/figures/text out.

What a report answers, for every configuration (mode, model, partition, batch, options …):

* how fast: samples/s per node count, speedup and efficiency against the configuration's run
  with the fewest ranks (results.analyze.add_scaling: one definition everywhere);
* where the time goes: phase breakdown (mean ± std over measured rank-iterations), exposed vs
  total communication (how much was hidden behind backward);
* who is slow: per-rank spread of the iteration and of its compute part; a straggler is a rank
  whose compute is >= 10 % above the run's median rank (the others wait for it in ``t_comm``);
* why: the performance model (orchestrator/perfmodel/) predicts every run's speedup from
  the *1-node* measured breakdown of the same configuration, with communication at N workers
  either from an α–β fit of the partition (``orch netbench``: ring all-reduce of the model's
  float32 gradient) or, without one, taken as measured in that run. Measured − predicted is
  the residual: what the model does not explain (contention, stragglers, oversubscription).

One module per step, data flowing one way:

* ``select``: training runs, configuration keys and labels, the 1-node baseline;
* ``predict``: every run's prediction from its baseline (orchestrator.perfmodel) and residuals;
* ``ranks``: per-rank statistics and stragglers;
* ``fmt``: numbers → table cells;
* ``tables``: ``Table`` and one builder per question;
* ``assemble``: ``build``, the whole ``Report`` of one result set (tables, summary, figures);
* ``plots``: PNG figures (matplotlib's Agg backend, imported only when figures are drawn):
  throughput vs nodes with the ideal line, measured vs predicted speedup, stacked phase bars,
  per-rank t_iter boxes;
* ``trend``: with a results history, each configuration's throughput over its recorded
  sweeps (and the band its references allow) and the comparison with the previous one;
* ``overview``: what a report says first: a summary of a few lines, a row per configuration
  (best scale, efficiency at the largest, where the time goes, whether the prediction held)
  and the flagged predictions' reasons, each once with its runs;
* ``render``: ``to_markdown`` links the figures; ``to_html`` embeds them (base64): one
  self-contained, styled file; both lead with the summary, the lead figures and the overview
  and fold the detail below.
"""

from __future__ import annotations

from ..results.select import baseline, completed, config_labels, config_of, training_runs
from .assemble import Report, build
from .fmt import as_float, fmt_num, ms
from .plots import CONFIG_COLORS, PHASE_COLORS
from .predictions import CommModel, from_baseline, gradient_bytes, overlap_of, predictions
from .ranks import COMPUTE, rank_stats, stragglers
from .render import to_html, to_markdown
from .tables import Table

__all__ = [
    "COMPUTE",
    "CONFIG_COLORS",
    "PHASE_COLORS",
    "CommModel",
    "Report",
    "Table",
    "as_float",
    "baseline",
    "build",
    "completed",
    "config_labels",
    "config_of",
    "fmt_num",
    "from_baseline",
    "gradient_bytes",
    "ms",
    "overlap_of",
    "predictions",
    "rank_stats",
    "stragglers",
    "to_html",
    "to_markdown",
    "training_runs",
]
