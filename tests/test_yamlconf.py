"""Every file a person hands orch is read within bounds (orchestrator/yamlconf.py,
docs/limits.md): a size, a line length, a nesting depth, and a number of nodes and characters
with YAML aliases expanded. Inputs built to exhaust time or memory are refused with one located
line, before anything large is built.

The fuzz test generates such inputs from a seeded generator (alias bombs of random width and
depth, deep nesting in flow and block style, huge scalars and lines, random bytes, mutations of
the shipped configs) and hands each to every loader: each answer is a value or one
``UserError`` naming the file, never another exception."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator import data, site, yamlconf
from orchestrator.errors import UserError
from orchestrator.history import references
from orchestrator.images import specs
from orchestrator.perfmodel import load_breakdown, load_trace_csv
from orchestrator.perfmodel.inputs import TRACE_LIMITS
from orchestrator.plan import study
from orchestrator.yamlconf import LIMITS, Limits

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted([*ROOT.glob("site-configs/*.yaml"), *ROOT.glob("studies/*.yaml"),
                  *ROOT.glob("frameworks/*.yaml"), *ROOT.glob("containers/specs/*.yaml")])


def alias_bomb(rng: random.Random) -> str:
    """Billion laughs: each level an anchored list of ``width`` aliases of the one before."""
    width = rng.randint(4, 12)
    levels = math.ceil(math.log(10 * LIMITS.nodes, width)) + rng.randint(0, 4)  # over the limit
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def scalar_bomb(rng: random.Random) -> str:
    """One long scalar named many times: few nodes, many characters."""
    text = "x" * rng.randint(3000, 4000)
    return f"s: &s {text}\nall: [{', '.join(['*s'] * rng.randint(20, 200))}]\n"


def deep_flow(rng: random.Random) -> str:
    n = rng.randint(LIMITS.depth + 1, 2000)
    return "a:\n" + "".join(f" {'[' * 50}\n" for _ in range(n // 50 + 1)) + " ]\n" * n


def deep_block(rng: random.Random) -> str:
    n = rng.randint(LIMITS.depth + 1, 200)
    return "".join(f"{' ' * i}k{i}:\n" for i in range(n)) + " " * n + "x\n"


def long_line(rng: random.Random) -> str:
    return "name: " + "y" * rng.randint(LIMITS.line_chars, 3 * LIMITS.line_chars) + "\n"


def too_big(rng: random.Random, limits: Limits = LIMITS) -> str:
    line = "# " + "z" * 70 + "\n"
    return "name: big\n" + line * (limits.bytes // len(line) + rng.randint(1, 100))


def random_bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000)))


def mutated(rng: random.Random) -> bytes:
    """A shipped config with a few bytes replaced, cut or repeated."""
    raw = bytearray(rng.choice(SHIPPED).read_bytes())
    for _ in range(rng.randint(1, 5)):
        at = rng.randrange(len(raw))
        kind = rng.randrange(3)
        if kind == 0:
            raw[at] = rng.choice(b"[]{}&*:-!|>'\"\n\t #\x00\xff")
        elif kind == 1:
            del raw[at:at + rng.randint(1, 40)]
        else:
            raw[at:at] = raw[at:at + rng.randint(1, 40)] * rng.randint(1, 30)
    return bytes(raw)


GENERATORS: dict[str, Callable[[random.Random], str | bytes]] = {
    "alias bomb": alias_bomb, "scalar bomb": scalar_bomb, "deep flow": deep_flow,
    "deep block": deep_block, "long line": long_line, "too big": too_big,
    "random bytes": random_bytes, "mutated": mutated}
# The generators whose every input is over a limit of every file (size, line length), and of
# YAML files (aliases, depth): refused, the message naming the limit.
READ_LIMITS = {"long line", "too big"}
OVER_A_LIMIT = {"alias bomb", "scalar bomb", "deep flow", "deep block", *READ_LIMITS}
YAML_LOADERS = {"site config", "study", "framework environment", "image spec",
                "references file", "breakdown YAML"}


def _framework(path: Path, monkeypatch) -> object:
    monkeypatch.setattr(site, "frameworks_dir", lambda: path.parent)
    return site.load_framework(path.stem)


def _image_spec(path: Path, monkeypatch) -> object:
    (path.parent / "specs").mkdir(exist_ok=True)
    path.rename(path.parent / "specs" / path.name)
    monkeypatch.setattr(specs, "containers_dir", lambda: path.parent)
    return specs.load_spec(path.stem)


def _manifest(path: Path, _monkeypatch) -> object:
    path.rename(path.parent / data.MANIFEST)
    return data.load_manifest(path.parent)


LOADERS: dict[str, tuple[str, Callable[[Path, object], object]]] = {
    "site config": ("site.yaml", lambda p, _m: site.load(str(p))),
    "study": ("study.yaml", lambda p, _m: study.load(str(p))),
    "framework environment": ("fw.yaml", _framework),
    "image spec": ("img.yaml", _image_spec),
    "references file": ("references.yaml", lambda p, _m: references.load(p)),
    "data manifest": ("m.json", _manifest),
    "breakdown YAML": ("b.yaml", lambda p, _m: load_breakdown(p)),
    "breakdown JSON": ("b.json", lambda p, _m: load_breakdown(p)),
    "trace CSV": ("t.csv", lambda p, _m: load_trace_csv(p)),
}
CASES_PER_GENERATOR = 3


def _cases() -> list[tuple[str, str, int]]:
    return [(loader, gen, seed) for loader in LOADERS for gen in GENERATORS
            for seed in range(CASES_PER_GENERATOR)]


@pytest.mark.parametrize(("loader", "generator", "seed"), _cases())
def test_fuzz_every_loader_answers_in_one_line(loader, generator, seed, tmp_path, monkeypatch):
    rng = random.Random(f"{loader}/{generator}/{seed}")
    content = (too_big(rng, TRACE_LIMITS) if (loader, generator) == ("trace CSV", "too big")
               else GENERATORS[generator](rng))
    name, load = LOADERS[loader]
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    try:
        load(path, monkeypatch)
    except UserError as exc:
        message = str(exc)
        assert name in message or data.MANIFEST in message, message
        if generator in READ_LIMITS or (generator in OVER_A_LIMIT and loader in YAML_LOADERS):
            assert "docs/limits.md" in message and "\n" not in message, message
    else:
        assert generator not in READ_LIMITS, "a file over a limit was read"


def test_alias_bomb_is_refused_at_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(alias_bomb(random.Random(0)))
    with pytest.raises(UserError, match=r"s\.yaml:\d+: the site config holds more than "
                                        r"10,000 values here, its aliases"):
        site.load(str(path))


def test_refusals_name_the_file_the_line_the_limit_and_the_fix(tmp_path):
    cases = {"long.yaml": (long_line(random.Random(1)), r"long\.yaml:1: a line longer than "
                           r"4,096 characters.*break it"),
             "deep.yaml": (deep_block(random.Random(1)), r"deep\.yaml:33: lists and mappings "
                           r"nested more than 32 deep.*flatten it"),
             "big.yaml": (too_big(random.Random(1)), r"big\.yaml: larger than 64 KiB, the most"
                          r" a site config may be")}
    for name, (text, pattern) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(UserError, match=pattern):
            site.load(str(path))


def test_a_file_without_end_is_read_no_further_than_the_limit():
    with pytest.raises(UserError, match=r"/dev/zero: larger than 64 KiB"):
        yamlconf.read_text(Path("/dev/zero"), "site config")


def test_aliases_within_the_limits_still_work(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: *b\n")
    data_, _root = yamlconf.read_yaml(path, "site config", "…")
    assert data_["one"] == data_["two"] == {"x": 1, "y": [1, 2]}


def test_json_nesting_and_size_are_bounded(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 40 + "]" * 40)
    with pytest.raises(UserError, match=r"deep\.json: lists and mappings nested more than 32"):
        yamlconf.read_json(deep, "data manifest")
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"a": [[1]]}))
    assert yamlconf.read_json(ok, "data manifest") == {"a": [[1]]}


def test_shipped_configs_are_far_inside_the_limits():
    for path in SHIPPED:
        text = path.read_text()
        assert len(text.encode()) * 4 < LIMITS.bytes, path
        yamlconf.check_events(text, path, "config")


def test_where_libyaml_stops_on_a_syntax_error_pyyaml_counts_again(tmp_path, monkeypatch):
    """The composer is PyYAML's: a file libyaml refuses but PyYAML reads is still counted."""
    import yaml

    class Refusing(yaml.SafeLoader):
        def check_event(self, *choices):
            raise yaml.YAMLError("libyaml's refusal")

    monkeypatch.setattr(yamlconf, "_FastLoader", Refusing)
    path = tmp_path / "s.yaml"
    path.write_text(alias_bomb(random.Random(2)))
    with pytest.raises(UserError, match=r"s\.yaml:\d+: the site config holds more than"):
        site.load(str(path))
