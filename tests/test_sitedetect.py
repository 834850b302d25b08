"""orch site detect: parsing sinfo and the probe, the draft's comments, validation, and the
command's refusals (existing file without --force, no Slurm: one line, exit 2)."""

from __future__ import annotations

import os

import yaml

from orchestrator.site import detect as sitedetect
from orchestrator.site.detect import gpus_of, minutes_of, parse_probe, parse_sinfo, render

from .conftest import run_orch

# sinfo -h -o '%P|%D|%c|%m|%G|%f|%l' on a GPU cluster with two kinds of node in one partition
SINFO_GPU = """\
gpu*|8|64|512000|gpu:a100:4(S:0-1)|a100,ib|2-00:00:00
gpu*|2|128|1024000|gpu:a100:8(S:0-1)|a100,ib,bigmem|2-00:00:00
cpu|32|48|192000|(null)|(null)|12:00:00
"""
# sinfo of the test cluster (Slurm 22.05.8)
SINFO_TESTCLUSTER = "ib*|4|2|4000|(null)|(null)|infinite\neth|4|2|4000|(null)|(null)|infinite\n"


def test_parse_sinfo_aggregates_node_kinds():
    gpu, cpu = parse_sinfo(SINFO_GPU)
    assert (gpu.name, gpu.default, gpu.nodes) == ("gpu", True, 10)
    assert min(gpu.cpus) == 64 and min(gpu.gpus) == 4 and gpu.features == {"a100", "ib",
                                                                            "bigmem"}
    assert (cpu.name, cpu.default, cpu.nodes, cpu.gpus) == ("cpu", False, 32, [0])


def test_gres_and_time_limits():
    assert gpus_of("gpu:a100:4(S:0-1)") == 4
    assert gpus_of("gpu:2,nic:1") == 2
    assert gpus_of("(null)") == 0
    assert [minutes_of(x) for x in ("infinite", "30:00", "12:00:00", "2-00:00:00")] == [
        None, 30, 720, 2880]


def test_probe_output():
    assert parse_probe("eth0\nib0\nlo\n---\nmlx5_0\nmlx5_1\n") == (
        ["eth0", "ib0", "lo"], ["mlx5_0", "mlx5_1"])
    assert parse_probe("eth0\nlo\n---\n") == (["eth0", "lo"], [])


def test_draft_comments_every_guess_and_validates():
    parts = parse_sinfo(SINFO_GPU)
    parts[0].interfaces, parts[0].ib_devices = ["eno1", "ib0", "lo"], ["mlx5_0"]
    parts[1].interfaces, parts[1].ib_devices = None, []
    parts[1].probe_error = "srun: error: Unable to allocate resources"
    text = render("bigsite", parts, {"gpu": False, "cpu": False})
    sitedetect.validate(text)
    data = yaml.safe_load(text)
    gpu, cpu = data["partitions"]
    assert gpu["interconnect"] == "infiniband" and gpu["ib_hca"] == ["mlx5_0"]
    assert gpu["socket_ifname"] == "ib0" and gpu["gpus_per_node"] == 4
    assert gpu["sbatch"]["time"] == "00:30:00" and cpu["sbatch"]["time"] == "00:30:00"
    assert data["default_partition"] == "gpu"
    assert cpu["interconnect"] == "ethernet" and cpu["socket_ifname"] == "lo"
    for line in text.splitlines():
        key = line.strip().lstrip("- ").split(":")[0]
        if key in ("interconnect", "socket_ifname", "time", "torch", "OMP_NUM_THREADS"):
            assert "#" in line, line  # every guessed or probed value says where it is from
    assert "CHECK: the probe job did not run" in text


def test_detect_on_fake_slurm(monkeypatch):
    def fake_run(cmd, timeout):
        if cmd[0] == "sinfo":
            return SINFO_TESTCLUSTER
        return "eth0\nlo\n---\n"

    monkeypatch.setattr(sitedetect, "_run", fake_run)
    monkeypatch.setattr(sitedetect.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr("orchestrator.backends.slurm.SlurmScheduler.nodes_on_loopback",
                        lambda self, p: True)
    data = yaml.safe_load(sitedetect.detect("tc"))
    assert [p["name"] for p in data["partitions"]] == ["ib", "eth"]
    assert {p["socket_ifname"] for p in data["partitions"]} == {"lo"}


def test_cli_without_slurm_says_so_in_one_line(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no sinfo on it
    res = run_orch("site", "detect", "--out", str(tmp_path / "x.yaml"), env=env)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "no Slurm here" in res.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_cli_never_overwrites_without_force(tmp_path):
    target = tmp_path / "x.yaml"
    target.write_text("keep me\n")
    res = run_orch("site", "detect", "--out", str(target))
    assert res.returncode != 0 and "--force" in res.stderr
    assert target.read_text() == "keep me\n"
