"""What the measurement harness costs: throughput with it / without it (issue #6; target ≥ 0.98).

The same PyTorch training step (LeNet-5, CIFAR-size synthetic batches, one process, one
thread) runs bare and inside orch's harness (phase timers, per-iteration JSONL record), in
alternating blocks in one process so that drift (turbo, page cache, other load) hits both
alike. Reported: samples/s of each and their ratio, the median over blocks.

Run: ``.venv/bin/python -m benchmarks.harness_overhead [--blocks 10 --iters 50]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from types import SimpleNamespace

import torch

from benchmarks import record
from orchestrator.rankside import harness
from orchestrator.rankside.torch import models as models_torch


def setup(batch: int):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = models_torch.build("lenet5", "cifar")
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    return model, opt, loss_fn, x, y


def bare(iters, model, opt, loss_fn, x, y) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        xb, yb = x.to("cpu"), y.to("cpu")
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def with_harness(session, iters, model, opt, loss_fn, x, y) -> float:
    session.args.iters, session.args.warmup = iters, 0
    t0 = time.perf_counter()
    for _ in session.iterations():
        with session.phase("t_io"):
            xb, yb = x, y
        with session.phase("t_h2d"):
            xb, yb = xb.to("cpu"), yb.to("cpu")
        with session.phase("t_f"):
            loss = loss_fn(model(xb), yb)
        with session.phase("t_b"):
            loss.backward()
        session.add("t_comm", 0.0)
        with session.phase("t_u"):
            opt.step()
            opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    a = parser.parse_args()
    state = setup(a.batch)
    bare(10, *state)  # warm up allocator and kernels
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as tmp:
        args = SimpleNamespace(batch_size=a.batch, iters=a.iters, warmup=0,
                               inject_failure=None)
        session = harness.Session(args, harness.RankInfo({}), harness.RankLogWriter(tmp.name))
        ratios, rates_bare, rates_h = [], [], []
        for _ in range(a.blocks):
            tb = bare(a.iters, *state)
            th = with_harness(session, a.iters, *state)
            rates_bare.append(a.iters * a.batch / tb)
            rates_h.append(a.iters * a.batch / th)
            ratios.append(tb / th)
        session.log.close()
    ratio = statistics.median(ratios)
    print(f"bare loop:    {statistics.median(rates_bare):8.0f} samples/s")
    print(f"with harness: {statistics.median(rates_h):8.0f} samples/s")
    print(f"throughput ratio harness/bare: {ratio:.3f} (median of {a.blocks} blocks; "
          f"target >= 0.98: {'met' if ratio >= 0.98 else 'NOT met'})")
    record.write("harness_overhead", f"{ratio:.3f} (target ≥ 0.98), median of {a.blocks} blocks",
                 {"throughput_ratio": round(ratio, 4), "blocks": a.blocks,
                  "bare_samples_per_s": round(statistics.median(rates_bare), 1),
                  "harness_samples_per_s": round(statistics.median(rates_h), 1)})


if __name__ == "__main__":
    main()
