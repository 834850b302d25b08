"""Today's workloads: transformers in the zoo, a user's own model, a user's own trainer, the
field's metrics (tokens/s, model FLOP/s, MFU, peak memory). What runs real ranks is in
test_workloads_ranks.py; this file plans, checks and computes in-process."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from orchestrator import zoo
from orchestrator.errors import UserError
from orchestrator.modes.trainer import rank as trainer_rank
from orchestrator.plan import trainer, usermodel
from orchestrator.plan.sweep import expand, validate
from orchestrator.results import peaks, workload
from orchestrator.spec.api import model_label
from orchestrator.spec.schema import SweepSpec

# --- the zoo's transformers in the sweep ---------------------------------------------------


def test_a_language_model_trains_on_its_own_dataset_by_default(local):
    runs = expand(SweepSpec(models=("gpt-nano", "lenet5"), nodes=(1,)), local)
    assert {(r.model, r.dataset) for r in runs} == {("gpt-nano", "bytes"), ("lenet5", "cifar")}


@pytest.mark.parametrize("mode", ["mxnet-kvstore", "cntk", "chainermn"])
def test_frameworks_without_transformers_refuse_them_naming_the_modes_that_have_them(local, mode):
    with pytest.raises(UserError) as exc:
        validate(SweepSpec(models=("gpt-nano",), modes=(mode,), nodes=(1,)), local)
    message = str(exc.value)
    assert "\n" not in message and f"mode '{mode}' has no gpt-nano" in message
    for having in ("torch-ddp", "torch-fsdp", "horovod", "mpi-ssgd", "tf-allreduce", "tf-ps"):
        assert having in message


def test_vit_and_bert_are_torch_only(local):
    with pytest.raises(UserError, match=r"modes that have it: horovod, mpi-ssgd, torch-ddp, "
                                        r"torch-fsdp$"):
        validate(SweepSpec(models=("vit-b16",), modes=("tf-allreduce",), nodes=(1,)), local)


def test_a_model_without_the_dataset_is_refused(local):
    with pytest.raises(UserError, match="model 'gpt-nano' has no 'cifar' variant; valid: bytes, "
                                        "webtext"):
        validate(SweepSpec(models=("gpt-nano",), dataset="cifar", nodes=(1,)), local)


# --- a user's own model ----------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """
    import torch
    from torch import nn


    def build():
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
"""


def test_a_user_model_is_checked_counted_and_named(local, tmp_path, monkeypatch):
    write(tmp_path / "mine.py", GOOD)
    monkeypatch.chdir(tmp_path)
    (run,) = expand(SweepSpec(models=("mine.py:build",), nodes=(2,)), local)
    assert run.model == f"{tmp_path / 'mine.py'}:build" and run.dataset == "cifar"
    assert run.model_params == 3 * 32 * 32 * 10 + 10
    # forward and the weight's gradient (the input's is not needed): 2 x 2 x 3072 x 10
    assert run.model_flops == 2 * 2 * (3 * 32 * 32) * 10
    assert run.run_id.startswith("torch-ddp-mine.build-local-n2-r0-")
    assert model_label(run.model) == "mine.build"
    (tmp_path / "mine.py").write_text(textwrap.dedent(GOOD) + "# changed\n")
    (again,) = expand(SweepSpec(models=("mine.py:build",), nodes=(2,)), local)
    assert again.model_sha256 != run.model_sha256 and again.run_id != run.run_id


@pytest.mark.parametrize(("body", "where", "what"), [
    ("def build(:\n    pass\n", ":1", "SyntaxError"),
    ("import not_a_module_here\n", ":1", "ModuleNotFoundError"),
    ("def other():\n    pass\n", "", "defines no function build()"),
    ("def build():\n    return 3\n", "", "returned int, not a torch.nn.Module"),
    ("from torch import nn\n\n\ndef build():\n    return nn.Linear(5, 2)\n", ":4 (build)",
     "RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    ("from torch import nn\n\n\ndef build():\n    raise ValueError('no weights')\n", ":5",
     "ValueError: no weights"),
])
def test_a_broken_user_model_is_one_located_line_before_anything_runs(local, tmp_path, body,
                                                                       where, what):
    path = write(tmp_path / "broken.py", body)
    with pytest.raises(UserError) as exc:
        expand(SweepSpec(models=(f"{path}:build",), nodes=(1,)), local)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"--model {path}:build: {path}")
    assert f"{path}{where}" in message and what in message


def test_a_user_model_runs_only_in_the_torch_modes(local, tmp_path):
    path = write(tmp_path / "mine.py", GOOD)
    with pytest.raises(UserError, match=r"runs in the PyTorch modes .* not in mxnet-kvstore"):
        expand(SweepSpec(models=(f"{path}:build",), modes=("mxnet-kvstore",), nodes=(1,)),
               local)


def test_example_batch_and_loss_of_the_module_are_used(tmp_path):
    path = write(tmp_path / "own.py", """
        import torch
        from torch import nn


        def build():
            return nn.Linear(7, 3)


        def example_batch(batch_size):
            return torch.randn(batch_size, 7), torch.randn(batch_size, 3)


        def loss(outputs, targets):
            return ((outputs - targets) ** 2).mean()
    """)
    from orchestrator.rankside.torch.workload import check

    facts = check(f"{path}:build", "cifar", 4)
    assert facts["params"] == 7 * 3 + 3 and facts["example_batch"] and facts["custom_loss"]
    assert facts["flops_per_sample"] == 2 * 2 * 7 * 3


# --- a user's own trainer --------------------------------------------------------------------

TRAINER = """
    name: tiny
    command: [python, train.py, --batch, "{batch_size}"]
    tokens_per_sample: 64
    throughput: {regex: "tokens/s: ([0-9.,]+)", unit: tokens/s}
    loss: {json: metrics.loss}
    mfu: {regex: "mfu ([0-9.]+)%", scale: 0.01}
"""


def test_a_trainer_file_becomes_runs_of_the_trainer_mode(local, tmp_path):
    path = write(tmp_path / "t.yaml", TRAINER)
    runs = expand(SweepSpec(models=(str(path),), modes=("trainer",), nodes=(1, 2)), local)
    assert [r.model for r in runs] == ["tiny", "tiny"]
    spec = json.loads(runs[0].script)
    assert spec["cwd"] == str(tmp_path) and spec["command"][-1] == "{batch_size}"
    assert runs[0].model_sha256 and runs[0].run_id.startswith("trainer-tiny-local-n1-")


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\ncommand: [python]\nthroughput: {regex: 'no group'}\n", "has no group"),
    ("name: x\ncommand: [python]\nthroughput: {regex: '(1)', unit: tokens/s}\n",
     "needs tokens_per_sample"),
    ("name: x\ncommand: []\nthroughput: {json: a}\n", "command"),
    ("name: x\ncommand: [python]\nthroughput: {json: a, regex: '(1)'}\n", "one of regex or json"),
    ("name: x\ncommand: [python]\nthroughput: {json: a}\nsurprise: 1\n", "surprise"),
])
def test_a_bad_trainer_file_is_located(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        trainer.load(str(path))
    assert f"\n{path}:" in str(exc.value) and message in str(exc.value)


def test_trainer_files_and_zoo_models_do_not_mix_modes(local, tmp_path):
    path = write(tmp_path / "t.yaml", TRAINER)
    with pytest.raises(UserError, match="a trainer file runs in mode trainer, not torch-ddp"):
        validate(SweepSpec(models=(str(path),), nodes=(1,)), local)
    with pytest.raises(UserError, match="give its trainer file"):
        validate(SweepSpec(models=("lenet5",), modes=("trainer",), nodes=(1,)), local)


def test_figures_are_read_by_regex_or_json_key():
    spec = trainer.TrainerSpec.model_validate(yaml_of(TRAINER)).model_dump(by_alias=True)
    assert trainer_rank.figure(spec["throughput"], "step 3 tokens/s: 12,345.5") == 12345.5
    assert trainer_rank.figure(spec["loss"], '{"metrics": {"loss": 2.5}}') == 2.5
    assert trainer_rank.figure(spec["loss"], "{not json") is None
    assert trainer_rank.figure(spec["mfu"], "mfu 41.5%") == pytest.approx(0.415)
    assert trainer_rank.figure(spec["throughput"], "nothing here") is None
    # Hugging Face's Trainer logs a rate of 10,000 and up as '1.349e+04' (format .4g): the
    # how-to's pattern reads both forms, whatever the machine's speed
    hf = {"regex": "'train_tokens_per_second': '([0-9.e+-]+)'", "json": None, "scale": 1.0}
    for logged, rate in (("9876", 9876.0), ("1.349e+04", 13490.0)):
        line = f"{{'loss': '4.5', 'train_tokens_per_second': '{logged}'}}"
        assert trainer_rank.figure(hf, line) == rate


def yaml_of(text: str) -> dict:
    import yaml

    return yaml.safe_load(textwrap.dedent(text))


# --- the metrics -----------------------------------------------------------------------------


def test_peaks_by_device_name_and_precision():
    peak, source = peaks.lookup("NVIDIA H100 80GB HBM3", "bf16")
    assert peak == pytest.approx(989.4e12) and "H100" in source
    assert peaks.lookup("NVIDIA H200", "fp32")[0] == pytest.approx(66.9e12)
    assert peaks.lookup("NVIDIA H100 PCIe", "bf16")[0] == pytest.approx(756e12)
    assert peaks.lookup("Tesla V100-SXM2-32GB", "tf32")[0] == pytest.approx(15.7e12)  # its fp32
    assert peaks.lookup("Tesla V100-SXM2-32GB", "bf16") == (None, "NVIDIA V100 SXM2 has no bf16 "
                                                                  "tensor cores")
    assert peaks.lookup(None, "fp32")[0] is None  # a CPU
    assert peaks.lookup(None, "fp32", {"fp32": 2.0})[0] == 2e12  # the site's
    assert "not in orch's table" in peaks.lookup("Some GPU", "bf16")[1]


class _Log:
    def __init__(self, footer: dict) -> None:
        self.footer = footer


def test_mfu_and_tokens_of_a_gpt_run_on_a_known_gpu(local, tmp_path):
    (run,) = expand(SweepSpec(models=("gpt2-small",), dataset="webtext", nodes=(2,),
                              options={"precision": ("bf16",)}), local)
    logs = [_Log({"device_name": "NVIDIA H100 80GB HBM3",
                  "peak_device_reserved_bytes": 30 << 30})] * 2
    out = workload.run_facts(run, tmp_path, logs, {"samples_per_s": 100.0,
                                                   "peak_device_bytes": 20 << 30})
    flops = zoo.get("gpt2-small").flops_per_sample("webtext")
    assert out["tokens_per_s"] == 100.0 * 1024 and out["tokens_per_s_per_device"] == 51200.0
    assert out["model_flops_per_s_per_device"] == 100.0 * flops / 2
    assert out["mfu"] == pytest.approx(100.0 * flops / 2 / 989.4e12)
    assert 0 < out["mfu"] < 1
    assert out["peak_memory_bytes"] == 30 << 30 and out["flops_basis"].startswith("6N")


def test_mfu_on_a_cpu_is_null_with_a_reason_unless_the_site_gives_a_peak(local, tmp_path):
    (run,) = expand(SweepSpec(models=("lenet5",), nodes=(1,)), local)
    out = workload.run_facts(run, tmp_path, [_Log({})], {"samples_per_s": 50.0,
                                                         "peak_rss_bytes": 1 << 28})
    assert out["mfu"] is None and "peak_tflops" in out["mfu_reason"]
    assert out["tokens_per_s"] is None and out["peak_memory_bytes"] == 1 << 28
    assert out["model_flops_per_s_per_device"] == 50.0 * zoo.get("lenet5").flops_per_sample(
        "cifar")
    prov = {"site": {"config": {"partitions": [{"name": "local", "peak_tflops": {"fp32": 0.1}}]}}}
    (tmp_path / "provenance.json").write_text(json.dumps(prov))
    out = workload.run_facts(run, tmp_path, [_Log({})], {"samples_per_s": 50.0})
    assert out["mfu"] == pytest.approx(out["model_flops_per_s_per_device"] / 0.1e12)
    assert out["peak_flops_source"] == "site config (peak_tflops)"


def test_a_user_model_is_not_the_zoo(tmp_path):
    assert usermodel.is_user_model("a.py:build") and not usermodel.is_user_model("lenet5")
    assert usermodel.resolve("a.py:build", tmp_path) == f"{tmp_path.resolve()}/a.py:build"
    assert usermodel.resolve("pkg.mod:build") == "pkg.mod:build"


# --- token data --------------------------------------------------------------------------------


def test_a_token_set_from_text_with_a_held_out_tail(local, tmp_path):
    from orchestrator import data

    text = tmp_path / "corpus"
    text.mkdir()
    (text / "a.txt").write_bytes(b"the quick brown fox " * 200)  # 4,000 bytes
    (text / "skip.bin").write_bytes(b"\0" * 1000)  # not a text suffix: left out
    out = tmp_path / "tokens"
    manifest = data.make_from(out, f"text:{text}", "bytes", None, local, test_fraction=0.25,
                              log=lambda m: None)
    assert (manifest.dataset, manifest.formats, manifest.classes) == ("bytes", ["raw"], 256)
    train = (out / "raw" / "tokens.bin").read_bytes()
    held = (out / "raw" / "test" / "tokens.bin").read_bytes()
    assert train + held == b"the quick brown fox " * 200 and len(held) == 1000
    assert manifest.samples == (3000 - 1) // 128 and manifest.test_samples == (1000 - 1) // 128
    with pytest.raises(UserError, match="does not read token sets from disk"):
        validate(SweepSpec(models=("gpt-nano",), modes=("tf-allreduce",), nodes=(1,),
                           data=str(out)), local)
    with pytest.raises(UserError, match="random tokens need no disk"):
        data.make(tmp_path / "r", "bytes", 10, ["raw"], local, log=lambda m: None)
    with pytest.raises(UserError, match="give --dataset bytes"):
        data.make_from(tmp_path / "w", f"text:{text}", "webtext", None, local,
                       log=lambda m: None)
