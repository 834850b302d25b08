"""Site configs: the shipped ones are valid, bad ones get located, actionable errors."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from orchestrator import site as sitemod
from orchestrator.errors import UserError

from .conftest import (
    ROOT,
    edit_container,
    edit_environment,
    edit_partition,
    edit_sbatch,
    orch,
    run_orch,
    site_file,
)

GOOD = """\
name: mini
scheduler: slurm
partitions:
  - name: ib
    interconnect: infiniband
    nodes: 2
    cpus_per_node: 8
    socket_ifname: ib0
environments:
  torch: {}
"""


def write(tmp_path, text, name="mini.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", ["local", "local-gpu", "testcluster", "example-gpu-cluster"])
def test_shipped_sites_are_valid_and_match_the_published_schema(name):
    site, path = sitemod.load(name)
    assert site.name == name
    jsonschema.validate(yaml.safe_load(path.read_text()), sitemod.schema())


def test_minimal_site_fills_defaults(tmp_path):
    site, _ = sitemod.load(str(write(tmp_path, GOOD)))
    part = site.partition(None)
    assert (part.name, part.gpus_per_node, part.launcher) == ("ib", 0, "srun")


def test_missing_field_names_file_line_and_field(tmp_path):
    text = GOOD.replace("    socket_ifname: ib0\n", "")
    with pytest.raises(UserError) as err:
        sitemod.load(str(write(tmp_path, text)))
    msg = str(err.value)
    assert "mini.yaml:4: partitions[0].socket_ifname: required field is missing" in msg


def test_mistyped_value_and_misspelt_field(tmp_path):
    text = GOOD.replace("nodes: 2", "nodes: two").replace("cpus_per_node", "cpu_per_node")
    with pytest.raises(UserError) as err:
        sitemod.load(str(write(tmp_path, text)))
    msg = str(err.value)
    assert "mini.yaml:6: partitions[0].nodes: Input should be a valid integer" in msg
    assert "(got 'two')" in msg
    assert "partitions[0].cpu_per_node: unknown field; valid fields here:" in msg
    assert "cpus_per_node" in msg.split("cpu_per_node: unknown field")[1]


def test_misspelt_environment_field_lists_environment_fields(tmp_path):
    text = GOOD.replace("torch: {}", "torch:\n    pyhton: /usr/bin/python3")
    with pytest.raises(UserError, match=r"environments\.torch\.pyhton: unknown field; valid "
                       r"fields here: build, container, env, modules, python, venv"):
        sitemod.load(str(write(tmp_path, text)))


def test_bad_interconnect_lists_choices(tmp_path):
    with pytest.raises(UserError, match=r"interconnect: Input should be 'infiniband' or "
                       r"'ethernet' \(got 'omnipath'\)"):
        sitemod.load(str(write(tmp_path, GOOD.replace("infiniband", "omnipath"))))


def test_cross_field_rules(tmp_path):
    with pytest.raises(UserError, match="default_partition 'gpu' is not one of"):
        sitemod.load(str(write(tmp_path, GOOD + "default_partition: gpu\n")))
    eth = GOOD.replace("infiniband", "ethernet").replace(
        "socket_ifname: ib0", "socket_ifname: eth0\n    ib_hca: [mlx5_0]")
    with pytest.raises(UserError, match="ib_hca is only meaningful"):
        sitemod.load(str(write(tmp_path, eth)))


@pytest.mark.parametrize("flag", ["--gres=gpu:4", "--gres=nvme:1,gpu:a100:2", "--gpus=4",
                                  "--gpus-per-node=4"])
def test_gpus_are_requested_once(tmp_path, flag):
    """gpus_per_node renders the request (--gpus-per-node, or --gres with gpu_request: gres):
    a GPU request in sbatch.extra would ask twice, so it is refused where it is written."""
    text = GOOD.replace("    socket_ifname: ib0\n", "    socket_ifname: ib0\n    gpus_per_node: 4\n"
                        f"    sbatch: {{extra: ['{flag}']}}\n")
    with pytest.raises(UserError, match=r"mini.yaml:\d+: partitions\[0\]\.sbatch\.extra: .*asks "
                       r"for GPUs.*gpu_request: gres.*remove it from extra"):
        sitemod.load(str(write(tmp_path, text)))
    other = text.replace(flag, "--gres=nvme:1")  # a GRES that is not a GPU stays allowed
    assert sitemod.load(str(write(tmp_path, other)))[0].partition("ib").sbatch.extra == [
        "--gres=nvme:1"]


def test_not_yaml_and_unknown_site(tmp_path):
    with pytest.raises(UserError, match=r"mini.yaml:\d+: not valid YAML"):
        sitemod.load(str(write(tmp_path, "name: [unclosed\n")))
    with pytest.raises(UserError, match=r"unknown site 'nowhere'; valid: .*local"):
        sitemod.load("nowhere")


def test_unknown_partition_lists_valid_ones():
    site, _ = sitemod.load("testcluster")
    with pytest.raises(UserError, match="no partition 'gpu'; valid: ib, eth"):
        site.partition("gpu")


def test_cli_validate_exit_codes(tmp_path):
    ok = run_orch("site", "validate", write(tmp_path, GOOD))
    assert ok.returncode == 0 and "valid site 'mini'" in ok.stdout
    bad = run_orch("site", "validate", write(tmp_path, GOOD.replace("nodes: 2", "nodes: -1")))
    assert bad.returncode == 2
    assert "partitions[0].nodes: Input should be greater than or equal to 1" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cli_schema_is_json_schema():
    proc = run_orch("site", "schema", check=True)
    schema = json.loads(proc.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "partitions" in schema["required"]


# Bad site configs of every kind: orch site validate exits 2 with the file named, no traceback.

def _raw(text: bytes):
    return ("raw", text)


SITE_CASES: list[tuple[str, object]] = [
    ("deep nesting", _raw(b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n")),
    ("not utf-8", _raw(b"name: x\n\xff\xfe\n")),
    ("utf-16", _raw("name: x\n".encode("utf-16"))),
    ("empty file", _raw(b"")),
    ("a list", _raw(b"- a\n- b\n")),
    ("a scalar", _raw(b"42\n")),
    ("bad yaml", _raw(b"name: [\n")),
    ("duplicate key", _raw((ROOT / "site-configs" / "local.yaml").read_bytes()
                           + b"scheduler: local\n")),
    ("tab indent", _raw(b"name: x\n\tscheduler: local\n")),
    ("nul byte", _raw(b"name: x\x00\n")),
]
for _key, _values in {
    "nodes": [True, False, 0, -1, 10**7, "4", 1.5, None, [], {}],
    "cpus_per_node": [True, 0, 10**6, "two", None],
    "gpus_per_node": [True, -1, 1000, "x"],
    "socket_ifname": ["", "a" * 16, "eth/0", "eth 0", "eth:0", " ", None, 5],
    "name": ["", "p" * 300, "-x", "a b", "a/b", None],
    "interconnect": ["", "myrinet", None],
    "launcher": ["", "nope", 3],
    "memory_per_node_gb": [0, -1, "lots"],
    "ib_hca": ["mlx5_0", [["x"]]],
}.items():
    for _v in _values:
        SITE_CASES.append((f"partition {_key}={_v!r}"[:80], edit_partition(_key, _v)))
for _v in ["0", "00:00:00", "00:99:99", "1:60", "abc", "", "-5", 0, True, "0-00:00:00"]:
    SITE_CASES.append((f"sbatch.time={_v!r}", edit_sbatch("time", _v)))
for _v in ["", " ", None, 5]:
    SITE_CASES.append((f"container.image={_v!r}", edit_container("image", _v)))
for _v in ["", "py thon", None]:
    SITE_CASES.append((f"container.python={_v!r}", edit_container("python", _v)))
SITE_CASES += [
    ("container.binds ['']", edit_container("binds", [""])),
    ("container.runtime docker", edit_container("runtime", "docker")),
    ("env key newline", edit_environment("env", {"A\n": "1"})),
    ("env key digit", edit_environment("env", {"1A": "1"})),
    ("env value int", edit_environment("env", {"A": 1})),
    ("modules str", edit_environment("modules", "gcc")),
    ("sbatch.extra not long", edit_sbatch("extra", ["-p x"])),
    ("sbatch.extra bare", edit_sbatch("extra", ["--"])),
    ("no partitions", lambda d: d.update(partitions=[])),
    ("partitions not list", lambda d: d.update(partitions="local")),
    ("default partition unknown", lambda d: d.update(default_partition="nope")),
    ("unknown field", lambda d: d.update(colour="blue")),
    ("scheduler pbs", lambda d: d.update(scheduler="pbs")),
    ("environments list", lambda d: d.update(environments=["torch"])),
]


@pytest.mark.parametrize("name,case", SITE_CASES, ids=[c[0] for c in SITE_CASES])
def test_fuzz_site_config(tmp_path, name, case):
    if isinstance(case, tuple):
        path = tmp_path / "fz.yaml"
        path.write_bytes(case[1])
    else:
        path = site_file(tmp_path, case)
    code, _, err = orch("site", "validate", path)
    assert code == 2, (name, err)
    assert err.startswith(f"orch: error: {path}") or str(path) in err, err
