"""The rank-side file protocol (orchestrator/protocol.py): the names of the files a rank writes
in ranks/, and which of them are rank logs."""

from __future__ import annotations

import json

from orchestrator import protocol


def test_device_log_is_not_taken_for_a_rank_log():
    # beside rank-<k>.jsonl in ranks/: no rank-log glob or parser may pick it up
    import fnmatch

    name = protocol.device_log_name(0)
    assert not fnmatch.fnmatch(name, "rank-*.jsonl") and protocol.task_of(name) is None


def _log_with(tmp_path, middle: bytes):
    header = b'{"type":"header","rank":0}\n'
    it = b'{"type":"iter","iter":%d,"t_start":1.0,"t_iter":0.5}\n'
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(header + it % 0 + middle + it % 1 + b'{"type":"footer","status":"ok"}\n')
    return path


class _Watched:
    """A binary file that remembers the longest piece any read handed out."""

    def __init__(self, raw: bytes):
        import io

        self.fh, self.most = io.BytesIO(raw), 0

    def readline(self, size: int = -1) -> bytes:
        line = self.fh.readline(size)
        self.most = max(self.most, len(line))
        return line


def test_a_line_over_the_bound_is_a_damaged_log_never_read_whole(tmp_path):
    huge = b'{"type":"iter","iter":5,"t_start":1.0,"t_iter":0.' + b"1" * (3 << 20) + b'}\n'
    path = _log_with(tmp_path, huge)
    log = protocol.read_rank_log(path)
    assert [r["iter"] for r in log.iters] == [0, 1] and log.footer
    assert log.problems == ["rank-0.jsonl:3: a line longer than 1 MiB: a damaged log"]
    # The fast scan parses a header, a footer and each segment's first line: over the bound,
    # it leaves the log to the line-by-line reader (iterlines checks the other lines).
    footer = b'{"type":"footer","status":"ok"}'
    for data in (huge + footer, b'{"type":"header"}\n' + huge + footer,
                 b'{"type":"header"}\n' + huge.rstrip()):
        assert protocol.scan_lines(data, 0).segments is None
    watched = _Watched(path.read_bytes())
    lines = list(protocol.bounded_lines(watched))
    assert lines[2] is None and len(lines) == 5
    assert watched.most <= protocol.MAX_LINE_BYTES + 1


def test_lines_up_to_the_bound_are_read_and_binary_lines_are_unreadable(tmp_path):
    pad = protocol.MAX_LINE_BYTES - 60
    long_ok = b'{"type":"iter","iter":5,"t_start":1.0,"t_iter":0.5,"x":"' + b"y" * pad + b'"}\n'
    assert len(long_ok) - 1 <= protocol.MAX_LINE_BYTES
    assert [r["iter"] for r in protocol.read_rank_log(_log_with(tmp_path, long_ok)).iters] == \
        [0, 5, 1]
    binary = bytes(b for b in range(256) if b != ord("\n"))
    log = protocol.read_rank_log(_log_with(tmp_path, binary + b"\n"))
    assert log.problems == ["rank-0.jsonl:3: unreadable line"]


# Values that cannot be (protocol.impossible): a record with one is a violation named by its
# line and value, and left out of the log's iterations.
HEADER = '{"type":"header","warmup":1,"iters":2}'
GOOD = {"type": "iter", "iter": 1, "window": "breakdown", "warmup": False, "t_start": 1.7e9,
        "t_iter": 0.02, "samples": 8, "t_f": 0.01, "t_b": 0.005, "t_comm_total": 0.001}
IMPOSSIBLE = {
    "negative t_iter": ({"t_iter": -0.02}, "t_iter = -0.02: an iteration takes time"),
    "zero t_iter": ({"t_iter": 0.0}, "t_iter = 0.0: an iteration takes time"),
    "NaN t_iter": ({"t_iter": float("nan")}, "t_iter = NaN: not a finite number"),
    "infinite phase": ({"t_b": float("inf")}, "t_b = Infinity: not a finite number"),
    "negative phase": ({"t_f": -1e-3}, "t_f = -0.001: a duration is not negative"),
    "negative total": ({"t_comm_total": -1.0}, "t_comm_total = -1.0: a duration is not "
                       "negative"),
    "NaN start": ({"t_start": float("nan")}, "t_start = NaN: not a finite number"),
    "NaN unknown key": ({"t_x": float("-inf")}, "t_x = -Infinity: not a finite number"),
    "negative samples": ({"samples": -8}, "samples = -8: not a sample count"),
    "huge samples": ({"samples": 10 ** 30}, f"samples = {10 ** 30}: no count, time or "
                     "duration is that large"),
    "negative iter": ({"iter": -1}, "iter = -1: not an iteration number"),
    "iter past the declared count": ({"iter": 6}, "iter = 6: past the 6 iterations the header "
                                     "declares"),
}


def _parsed(*records: dict, header: str = HEADER, footer: dict | None = None):
    lines = [header, *(json.dumps({**GOOD, **r}) for r in records)]
    if footer is not None:
        lines.append(json.dumps({"type": "footer", "status": "ok", **footer}))
    return protocol.parse_lines(lines, 0, "rank-0.jsonl")


def test_impossible_values_are_violations_naming_line_and_value():
    for name, (change, why) in IMPOSSIBLE.items():
        log = _parsed({"iter": 0}, change, {"iter": 2})
        assert [r["iter"] for r in log.iters] == [0, 2], name
        assert log.violations == [f"rank-0.jsonl:3: {why}"], name
        assert log.problems == [], name


def test_possible_values_are_kept():
    log = _parsed({"iter": 0, "t_f": 0.0, "t_io": None, "samples": None}, {"iter": 5})
    assert [r["iter"] for r in log.iters] == [0, 5] and log.violations == []
    # a header that declares no count bounds nothing but absurd numbers
    log = _parsed({"iter": 10 ** 6}, header='{"type":"header"}')
    assert log.violations == [] and len(log.iters) == 1
    # an epoch run's steps are not counted by the header; a diverged loss is a measurement
    epoch = {"type": "epoch", "epoch": 1, "t_start": 1.7e9, "t_epoch": 3.0, "t_eval": 0.5,
             "train_loss": float("nan"), "train_acc": 0.1, "test_acc": 0.1, "samples": 64}
    log = protocol.parse_lines([HEADER, json.dumps(epoch)], 0)
    assert len(log.epochs) == 1 and log.violations == []


def test_zero_samples_beside_iterations_that_moved_samples_are_violations():
    log = _parsed({"iter": 0}, {"iter": 1, "samples": 0})
    assert log.violations == ["rank-0.jsonl:3: samples = 0 where the log's other iterations "
                              "moved samples"]
    # a mode that moves no samples (the all-reduce benchmark) logs 0 in every iteration
    assert _parsed({"iter": 0, "samples": 0}, {"iter": 1, "samples": 0}).violations == []


def test_a_footer_that_contradicts_the_records_is_a_violation():
    log = _parsed({"iter": 0, "t_start": 2000.0}, footer={"ended_at": 1000.0})
    assert log.violations == ["rank-0.jsonl: footer: ended_at = 1000.0 is before the last "
                              "iteration started (2000.0)"]
    native = {"window": "native", "warmup": False}
    log = _parsed({"iter": 0, **native}, {"iter": 1, **native},
                  footer={"device_metrics": {"window_samples": 24}})
    assert log.violations == ["rank-0.jsonl: footer: device_metrics.window_samples = 24, the "
                              "native window's measured records hold 16"]
    assert _parsed({"iter": 0, **native}, footer={"ended_at": 1.8e9, "device_metrics": {
        "window_samples": 8}}).violations == []


def test_records_and_footers_of_the_wrong_type_are_unreadable():
    for bad in ({**GOOD, "samples": 8.0}, {**GOOD, "samples": True}, {**GOOD, "samples": "8"},
                {"type": "header", "host": 5}, {"type": "header", "node_rank": "0"},
                {"type": "footer", "status": "ok", "error": 5},
                {"type": "footer", "status": "ok", "ended_at": "late"},
                {"type": "footer", "status": "ok", "comm_total_reason": ["x"]}):
        assert protocol.parse_record(json.dumps(bad)) is None, bad
