"""The fidelity benchmark's PyTorch twins (benchmarks/native) run the run dimensions the way
PyTorch's recipes write them, read from the same rank arguments orch renders: a fidelity
ratio in bf16 + channels_last compares orch's rank with a twin that computes the same."""

from __future__ import annotations

import argparse
import sys

import pytest

torch = pytest.importorskip("torch")

from benchmarks.native import _torch as native  # noqa: E402
from benchmarks.native._common import parse_args  # noqa: E402
from orchestrator.modes.torch_options import RUN_DIMENSIONS  # noqa: E402


def args(**dims) -> argparse.Namespace:
    values = {o.name: o.default for o in RUN_DIMENSIONS}
    values.update(dims)
    return argparse.Namespace(**values)


def test_twin_reads_the_dimension_flags_orch_renders(monkeypatch):
    # A rank line as orch renders it (tests/fixtures/gpu-h200-dims: --precision bf16; a value
    # at its default is left out), read by the twins' parser.
    monkeypatch.setattr(sys, "argv", ["twin", "--bare", "--model", "resnet50", "--batch-size",
                                      "128", "--iters", "20", "--precision", "bf16",
                                      "--memory-format", "nhwc", "--trace", "no"])
    parsed = parse_args(extra=(("--backend", "gloo"), *native.DIMENSION_FLAGS))
    assert (parsed.precision, parsed.memory_format) == ("bf16", "nhwc")
    assert (parsed.compile, parsed.pin_memory, parsed.cudnn_benchmark) == ("no", "yes", "no")


def test_bf16_channels_last_step_computes_in_bf16_on_channels_last_input():
    recipe = native.Recipe(args(precision="bf16", memory_format="nhwc"), torch.device("cpu"))
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                               torch.nn.LazyLinear(2))
    conv(torch.zeros(1, 3, 8, 8))  # materialise the lazy layer
    model = recipe.model(conv)
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    seen = {}
    model[0].register_forward_hook(lambda m, i, o: seen.update(
        dtype=o.dtype, nhwc=i[0].is_contiguous(memory_format=torch.channels_last)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = recipe.step(model, optimizer, torch.nn.CrossEntropyLoss())
    before = model[0].weight.detach().clone()
    step(*recipe.to_device(torch.randn(2, 3, 8, 8), torch.tensor([0, 1])))
    assert seen == {"dtype": torch.bfloat16, "nhwc": True}
    assert model[0].weight.dtype == torch.float32  # AMP: fp32 master weights, updated
    assert not torch.equal(before, model[0].weight)


def test_weights_stay_nchw_where_the_framework_shards_them():
    recipe = native.Recipe(args(memory_format="nhwc"), torch.device("cpu"))
    conv = recipe.model(torch.nn.Conv2d(3, 4, 3), weights_nchw=True)
    assert conv.weight.is_contiguous()
    x, _ = recipe.to_device(torch.randn(2, 3, 8, 8), torch.tensor([0, 1]))
    assert x.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("precision, scaled, tf32", [("fp32", False, False),
                                                     ("tf32", False, True),
                                                     ("fp16", True, False)])
def test_precision_sets_scaler_and_tf32_as_orch_does(precision, scaled, tf32):
    recipe = native.Recipe(args(precision=precision), torch.device("cpu"))
    assert recipe.scaler.is_enabled() is scaled
    assert torch.backends.cudnn.allow_tf32 is tf32
    assert torch.backends.cuda.matmul.allow_tf32 is tf32
    assert recipe.pin is False  # pinning is for copies to a GPU


def test_a_stopped_fidelity_run_is_recorded_from_the_rounds_it_printed():
    from benchmarks import fidelity

    printed = [fidelity.round_line("torch-ddp", "resnet50", k, fidelity.Round(o, n, 0.02, s, 0.7))
               for k, (o, n, s) in enumerate([(3052.6, 3463.2, 0.0176), (3652.0, 3799.2, None),
                                              (3913.9, 3530.4, 0.023)])]
    rounds = fidelity.rounds_from_log("\n".join(["=== fidelity", *printed, "=== dims"]))
    got = rounds[("torch-ddp", "resnet50")]
    assert [(r.orch, r.native, r.load) for r in got] == [(3052.6, 3463.2, 0.7),
                                                         (3652.0, 3799.2, 0.7),
                                                         (3913.9, 3530.4, 0.7)]
    assert [r.step_ratio for r in got] == [0.88, None, 1.15]  # as printed: 3 decimals
    (row,) = fidelity.summarize(rounds)
    assert row["ratio"] == pytest.approx(3652.0 / 3799.2)


def test_token_batches_and_loss_are_orchs():
    """gpt-nano's twin feeds the tensors orch's ranks feed (rankside.torch.workload) and its
    nanoGPT-style loss is orch's SequenceCrossEntropy: the fidelity ratio compares equals."""
    from orchestrator.rankside.torch.workload import Workload

    a = argparse.Namespace(batch_size=3, dataset="bytes", model="gpt-nano")
    twin = native.synthetic_batches(a, rank=1)
    w = Workload("gpt-nano", "bytes")
    info = argparse.Namespace(rank=1, world_size=2)
    mine = w.batches(argparse.Namespace(data=None, batch_size=3), info)
    for _ in range(5):
        (x, y), (x2, y2) = next(twin), next(mine)
        assert torch.equal(x, x2) and torch.equal(y, y2)
    logits = torch.randn(3, 128, 256)
    assert torch.equal(native.loss_function(a)(logits, y), w.loss_fn(logits, y))
