"""Rank-side helpers shared by the modes' ranks: the harness (arguments, timers, the rank log),
the model zoo of each framework, input pipelines, the layer-wise trace, data writers.

Only rank-side code imports a deep-learning framework, and only inside a rank's process. It is
staged beside the runs (orchestrator.modes.staging) and run with the environment's Python; each
mode's own rank is ``orchestrator/modes/<name>/rank.py``.
"""


def zoo_names(library=None):
    """(model, datasets) of the catalogue (those ``library``'s zoo builds), for rank-side code
    on Python >= 3.7."""
    from orchestrator import zoo

    return [(name, zoo.get(name).datasets) for name in zoo.names()
            if library is None or zoo.get(name).built_by(library)]
