"""The performance model of synchronous SGD training, and what feeds and checks it.

Why it exists: measured scaling numbers only tell what happened on the nodes we ran on. To say
*why* a run scales (I/O, compute or communication bound) and to answer what-if questions
(10GbE vs 100Gb InfiniBand, more workers than we measured, wait-free back-propagation or not)
we need a small analytic model fed by measured phase times. The formulas follow the two source
papers summarised in docs/measurements.md ("One iteration, split into phases", "The
performance model").

One module per part, data flowing one way:

* ``inputs``: breakdowns, layer-wise traces, a run's gradient size and overlap policy;
* ``compute``: the iteration time from phases, speedup, the synchronization wait;
* ``comm``: the α–β link model, its fit, each communication pattern's cost on a two-level
  network;
* ``schedule``: the backward + communication timeline of a trace (no overlap, or WFBP);
* ``predict``: :func:`predict`, the one entry point, and the callers that shape its rows;
* ``interval``: the interval a prediction states (a run's spread, the fit's error, the
  network's corners); ``validity``: the flags a prediction carries before its run.

Pure but for reading the breakdown and trace files a caller names (``inputs``): nothing here
writes a file, starts a job, imports a deep-learning framework, touches a scheduler or reads a
clock. What measures the network
(netbench, the pre-flight) and states predictions before runs (the ledger) is
``orchestrator.execute``'s; what scores them and answers what-if questions is
``orchestrator.report``'s.
"""

from .comm import (
    PATTERN_MODELS,
    AlphaBeta,
    Network,
    allreduce_time,
    fit_alpha_beta,
    hierarchical_allreduce_time,
    parameter_server_time,
    pattern_comm_time,
    reduce_scatter_allgather_time,
    ring_allreduce_time,
)
from .compute import expected_max_normal, iteration_time, phase_iteration_time, speedup, speedup_eq8
from .inputs import (
    PHASES,
    Breakdown,
    Layer,
    ModelInputError,
    Trace,
    gradient_bytes,
    load_breakdown,
    load_trace_csv,
    overlap_of,
    priced_overlap,
    run_options,
)
from .predict import (
    Measured,
    Prediction,
    measured_point,
    predict,
)
from .schedule import (
    LayerTiming,
    Schedule,
    Send,
    format_schedule,
    scale_trace_comm,
    schedule_none,
    schedule_wfbp,
    trace_iteration_us,
)

__all__ = [
    "PATTERN_MODELS",
    "PHASES",
    "AlphaBeta",
    "Breakdown",
    "Layer",
    "LayerTiming",
    "Measured",
    "ModelInputError",
    "Network",
    "Prediction",
    "Schedule",
    "Send",
    "Trace",
    "allreduce_time",
    "expected_max_normal",
    "fit_alpha_beta",
    "format_schedule",
    "gradient_bytes",
    "hierarchical_allreduce_time",
    "iteration_time",
    "load_breakdown",
    "load_trace_csv",
    "measured_point",
    "overlap_of",
    "parameter_server_time",
    "pattern_comm_time",
    "phase_iteration_time",
    "predict",
    "priced_overlap",
    "reduce_scatter_allgather_time",
    "ring_allreduce_time",
    "run_options",
    "scale_trace_comm",
    "schedule_none",
    "schedule_wfbp",
    "speedup",
    "speedup_eq8",
    "trace_iteration_us",
]
