"""The rank-side file protocol (orchestrator/protocol.py): the names of the files a rank writes
in ranks/, and which of them are rank logs."""

from __future__ import annotations

from orchestrator import protocol


def test_device_log_is_not_taken_for_a_rank_log():
    # beside rank-<k>.jsonl in ranks/: no rank-log glob or parser may pick it up
    import fnmatch

    name = protocol.device_log_name(0)
    assert not fnmatch.fnmatch(name, "rank-*.jsonl") and protocol.task_of(name) is None
