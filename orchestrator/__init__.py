"""orch: distributed deep-learning training benchmarks on HPC clusters.

This module must stay importable by any Python a rank runs (3.6 for CNTK included): it holds
only the version, because rank-side code (``orchestrator.rankside``,
``orchestrator.modes.<name>.rank``) imports it.
"""

__version__ = "0.1.0"
