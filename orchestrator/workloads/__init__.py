"""Rank-side code: the harness and one workload per distributed mode.

Only these modules import a deep-learning framework, and only inside a rank's process. They are
staged beside the runs (orchestrator.rundir.stage_lib) and run with the environment's Python.
"""
