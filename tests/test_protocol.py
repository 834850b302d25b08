"""The rank-side file protocol (orchestrator/protocol.py): the names of the files a rank writes
in ranks/, and which of them are rank logs."""

from __future__ import annotations

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
