"""Rank-side code: the harness and one workload per distributed mode.

Only these modules import a deep-learning framework, and only inside a rank's process. They are
staged beside the runs (orchestrator.rundir.stage_lib) and run with the environment's Python.
"""


def zoo_names():
    """(model, datasets) of the catalogue, for rank-side code on Python >= 3.7."""
    from orchestrator import zoo

    return [(name, zoo.get(name).datasets) for name in zoo.names()]
