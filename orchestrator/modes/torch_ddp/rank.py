"""PyTorch DDP rank: trains a zoo model on synthetic data; two windows (protocol.WINDOWS).

Throughput window (``native``): ``DistributedDataParallel(model)`` as PyTorch's tutorial writes
it, no comm hook, the plain loop (zero_grad, forward, ``loss.backward()``, ``optimizer.step()``),
timed by wall clock only. samples/s comes from it.

Breakdown window: that DDP wrapper is dropped (its reducer removes its autograd hooks) and the
same model is wrapped again with a communication hook that all-reduces (averages) each bucket,
exactly as DDP's default hook does, and records when things happened:

* a bucket's hook is called the moment its gradients are ready, so the last call marks the end
  of backward *compute* (``ready``);
* each bucket's all-reduce is timed from launch to completion (the future's callback):
  ``t_comm_total`` is their sum;
* ``t_comm`` (exposed) is the part of ``loss.backward()`` after ``ready`` during which an
  all-reduce was still in flight: ``min(end, last completion) - ready``, never negative. The
  rest of ``loss.backward()`` (autograd's own tail: copying bucket views back into the
  gradients) is ``t_b``. As every bucket was launched by ``ready``, exposed <= total.

On a GPU the same instants are CUDA events, not host clocks: under NCCL a bucket's future
completes (and its callback runs) when the all-reduce is *enqueued*, its work then running on
NCCL's stream, so host times would see no communication at all. An event recorded on the
compute stream when the hook is called marks ``ready``; one recorded in the callback, whose
stream is made to wait for the all-reduce (PyTorch's CUDA-aware futures), marks its end.

Every DDP wrapper takes the run's ``--bucket-cap-mb`` (DDP's ``bucket_cap_mb``: gradients are
all-reduced in buckets of that many MiB, the first bucket 1 MiB whatever it is).

The footer's ``comm_bucket_bytes`` are DDP's buckets in the order their gradients become
ready (:func:`bucket_bytes`); the last holds the first layers' gradients, made last, so its
all-reduce starts only when backward has ended and nothing can hide it.

World size 1: no hook is installed and nothing is counted as communication (DDP's all-reduce of
a one-member group is a local copy): ``t_comm = t_comm_total = 0``, ``t_b`` = backward.

Run dimensions (``torch_common.Dims``): both windows run forward + loss under autocast, backward
and the update through the GradScaler (fp16), channels_last model and batches (nhwc). With
``compile`` the DDP-wrapped model is compiled, as PyTorch's DDP + ``torch.compile`` notes advise
(DDP's optimizer splits the graph at its buckets so the all-reduces still overlap backward); the
breakdown window's new wrapper is compiled again, its compile timed as ``t_compile_breakdown``.
"""

from __future__ import annotations

import gc
import time

from orchestrator.rankside import harness
from orchestrator.rankside.torch.common import (
    Dims,
    Steps,
    comm_delay_s,
    delayed_allreduce,
    init_distributed,
    input_batches,
    leave_distributed,
    native_window,
    note_device_memory,
    parameter_checksum,
    plain_step,
)

from .mode import MODE


def bucket_bytes(param_bytes: list[int], cap: int) -> list[int]:
    """DDP's buckets (bytes each), in the order backward fills them: the parameters in
    reverse of registration order (roughly the order their gradients become ready), a bucket
    closed once it holds at least ``cap`` bytes (``bucket_cap_mb``). This is the assignment
    DDP rebuilds after its first iteration (its 1 MiB first bucket only lives until then)."""
    out, current = [], 0
    for size in reversed(param_bytes):
        current += size
        if current >= cap:
            out.append(current)
            current = 0
    return out + ([current] if current else [])


class BucketTimer:
    """A DDP comm hook that all-reduces (averages) a bucket and records when things happened:
    host clocks on the CPU, CUDA events on a GPU (see the module docstring)."""

    def __init__(self, world_size: int, cuda: bool = False, delay_s: float = 0.0) -> None:
        self.world_size = world_size
        self.cuda = cuda
        self.delay_s = delay_s  # comm_delay_ms: each bucket completes this late
        self.reset()

    def reset(self) -> None:
        self.last_ready = None
        self.last_done = None
        self.total = 0.0
        self.buckets = 0
        self._events = []  # CUDA: (ready event, completion event) per bucket

    def hook(self, state, bucket):  # signature required by register_comm_hook
        import torch
        import torch.distributed as dist

        launched = time.perf_counter()
        self.last_ready = launched
        self.buckets += 1
        ready = None
        if self.cuda:
            ready = torch.cuda.Event(enable_timing=True)
            ready.record()  # the compute stream, where this bucket's gradients were made
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def finished(f):
            if self.delay_s:
                time.sleep(self.delay_s)
            if ready is not None:
                done_event = torch.cuda.Event(enable_timing=True)
                done_event.record()  # this stream waits for the all-reduce
                self._events.append((ready, done_event))
            else:
                done = time.perf_counter()
                self.total += done - launched
                self.last_done = done if self.last_done is None else max(self.last_done, done)
            return f.value()[0].div_(self.world_size)

        return fut.then(finished)

    def exposed(self, end: float) -> float:
        """Seconds of this backward after its last bucket was ready during which an all-reduce
        was still in flight; also sums ``total``. CPU: ``end`` is when loss.backward()
        returned. CUDA: call after a device synchronize (the events must have happened)."""
        if not self.cuda:
            ready = self.last_ready or end
            return max(0.0, min(end, self.last_done or ready) - ready)
        if not self._events:
            return 0.0
        last_ready = self._events[-1][0]
        self.total = sum(r.elapsed_time(d) for r, d in self._events) / 1e3
        return max(0.0, max(last_ready.elapsed_time(d) for _, d in self._events) / 1e3)


def write_trace(args, info, ddp, model, loss_fn, source) -> None:
    """The layer-wise trace of DDP's step (rank 0 writes trace.csv beside its log)."""
    import os

    from orchestrator.rankside.torch import trace as trace_torch

    rows = trace_torch.trace(ddp, model, loss_fn, source)
    if info.rank == 0:
        trace_torch.write_csv(rows, os.path.join(args.log_dir, "trace.csv"))


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch", mode="torch-ddp") as s:
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from orchestrator.rankside.torch.workload import Workload

        torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
        s.footer["versions"] = harness.versions(torch=torch.__version__)
        s.footer["threads"] = torch.get_num_threads()
        info = s.info
        device = init_distributed(args.backend, info)
        dims = Dims(args, device, s.footer)
        workload = Workload(args.model, args.dataset, args.classes)
        workload.note(s.footer)
        model = dims.prepare(workload.model.to(device))
        device_ids = [device.index] if device.type == "cuda" else None  # ranks may share a GPU
        wrap = {"device_ids": device_ids, "bucket_cap_mb": args.bucket_cap_mb}  # every DDP's
        s.footer["bucket_cap_mb"] = args.bucket_cap_mb
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = workload.loss_fn
        if args.epochs:  # time to accuracy: whole epochs of DDP's own step
            from orchestrator.rankside.torch import epochs as epochs_torch

            plain = dims.compiled(DistributedDataParallel(model, **wrap))
            epochs_torch.train(s, args, info, plain_step(plain, optimizer, loss_fn, dims), model,
                               device, dims=dims, workload=workload)
            s.footer["param_checksum"] = parameter_checksum(model)
            note_device_memory(s.footer, device)
            leave_distributed()
            return
        source = input_batches(args, info, workload, dims)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

        delay = comm_delay_s(args)
        plain = DistributedDataParallel(model, **wrap)
        if delay and info.world_size > 1:
            plain.register_comm_hook(state=None, hook=delayed_allreduce(info.world_size, delay))
        plain = dims.compiled(plain)
        step = plain_step(plain, optimizer, loss_fn, dims)
        dims.compile_step(step, source, sync)
        native_window(s, source, device, step, sync if device.type == "cuda" else None, dims)
        del plain, step  # its reducer (and autograd hooks) go with it, compiled or not
        gc.collect()

        ddp = DistributedDataParallel(model, **wrap)
        timer = BucketTimer(info.world_size, cuda=device.type == "cuda", delay_s=delay)
        if info.world_size > 1:  # one rank: nothing to communicate, nothing to time
            ddp.register_comm_hook(state=None, hook=timer.hook)
        net = dims.compiled(ddp)
        dims.compile_step(plain_step(net, optimizer, loss_fn, dims), source, sync,
                          key="t_compile_breakdown")

        def backward(loss):  # its all-reduces run inside: split into t_b and exposed t_comm
            timer.reset()
            start = time.perf_counter()
            dims.backward(loss)
            sync()
            end = time.perf_counter()
            exposed = min(timer.exposed(end), end - start)
            s.add("t_b", end - start - exposed)
            s.add("t_comm", exposed)
            s.add("t_comm_total", timer.total)
            return loss

        steps = Steps(source, dims, net, loss_fn, optimizer, sync)
        loss = steps.run(s, backward=(None, backward))
        s.footer["param_checksum"] = parameter_checksum(model)
        note_device_memory(s.footer, device)
        if args.trace == "yes":  # after the checksum: tracing steps no optimizer
            write_trace(args, info, ddp, model, loss_fn, source)
        s.footer["comm_buckets"] = timer.buckets
        s.footer["comm_bucket_bytes"] = bucket_bytes(
            [p.numel() * p.element_size() for p in model.parameters() if p.requires_grad],
            args.bucket_cap_mb << 20)
        s.footer["loss"] = float(loss.detach())
        leave_distributed()


if __name__ == "__main__":
    main()
