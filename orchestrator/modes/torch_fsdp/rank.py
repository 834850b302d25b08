"""PyTorch FSDP2 rank (``fully_shard``): trains a zoo model on synthetic data, times each phase.

With ``--epochs`` (time to accuracy) the sharded model trains whole epochs with the
same plain step through :mod:`orchestrator.rankside.torch.epochs`, the loop torch-ddp uses
(``DistributedSampler`` shares, as FSDP's own examples shard an epoch), and neither window runs.

Two windows (protocol.WINDOWS): first the throughput window, the plain loop on the sharded model
(zero_grad, forward, ``loss.backward()``, ``optimizer.step()``) with FSDP2's own comm objects and
no timer; then the comm timers below are installed and the breakdown window runs.

Sharding: ``torch.manual_seed(0)`` then the zoo model; ``fully_shard`` on every *unit* (each
top-level child that holds parameters, and, for a top-level ``nn.Sequential``, each of its
children that holds parameters: LeNet-5 ``conv1 conv2 fc1 fc2 fc3``, ResNet ``conv1 bn1
layer1.0 ... layer4.1 fc``, AlexNet ``features.conv1 ... classifier.fc8``), then on the whole
model (the root keeps whatever parameters no unit took). One 1-D mesh over all ranks; SGD
lr=0.01 momentum=0.9 on the sharded (DTensor) parameters, as torch-ddp.

Communication. FSDP2 all-gathers a unit's parameters in its pre-forward, again in its
pre-backward when ``--reshard-after-forward yes`` (the default, FSDP2's too), and
reduce-scatters its gradients in its post-backward. Every one of these collectives goes through
the unit's ``AllGather`` / ``ReduceScatter`` comm object, which FSDP2 lets one replace
(``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter`` in torch 2.13). This
rank installs, on every unit, a subclass of FSDP2's own default comm that times the call and
delegates to it, so the collectives are exactly the ones FSDP2 would issue. What is timed is
the collective itself; the copy into the all-gather buffer, the copy out of it into the
parameters and the gradient copy-in stay compute (the gradient averaging is the
reduce-scatter's own ``ReduceOp.AVG``, which Gloo in torch 2.13 supports).

* CPU / Gloo (what this machine runs): FSDP2 issues every collective with ``async_op=False``
  (no ``unshard_async_op``, no explicit prefetch is set), and on the CPU its "streams" are no-ops,
  so each collective blocks the training thread until it is done; nothing overlaps it. Hence,
  per iteration, ``t_comm_total`` = the sum of the wall time of every all-gather and
  reduce-scatter call, and ``t_comm`` (exposed) = the same sum. ``t_f`` = the forward (+ loss)
  wall time minus the collectives that ran inside it (all-gathers), ``t_b`` = the
  ``loss.backward()`` wall time minus the collectives inside it (all-gathers when resharded
  after forward, prefetched all-gathers, reduce-scatters). Waiting for a slower peer inside a
  collective counts as communication, as in every other mode.
* CUDA / NCCL (written for GPU partitions, not run on this machine): FSDP2 launches the
  collectives on its own all-gather / reduce-scatter streams, so the call returns at once. The
  wrapper records CUDA events around each collective on its stream: ``t_comm_total`` = the sum
  of those durations. Exposure is measured where the compute stream waits for a collective (the
  unit's ``wait_for_unshard``, the reduce-scatter buffer recycling at a ``post_backward``, and
  ``finalize_backward`` at the end of backward): an event is recorded on the compute stream when
  it reaches the wait, and the stall is ``max(0, end - max(reached, start))`` of the collective
  waited for. ``t_comm`` = the sum of the stalls (disjoint intervals on one stream, each inside
  its collective, so ``t_comm <= t_comm_total``); ``t_f`` / ``t_b`` = the forward / backward
  wall times (each ended by ``cuda.synchronize``) minus the stalls in them.

World size 1: FSDP2 issues no collective at all (unshard copies the local shard, the
reduce-scatter becomes a copy); the timers are not even installed, so ``t_comm`` =
``t_comm_total`` = 0. ``t_io``, ``t_h2d`` and ``t_u`` are timed as in torch-ddp, so the six
phases add up to ``t_iter`` (less the loop's own overhead). ``t_comm_ag`` and ``t_comm_rs``
split ``t_comm_total`` by kind.

Run dimensions (``torch_common.Dims``): mixed precision is ``torch.autocast`` around forward +
loss, not FSDP2's ``MixedPrecisionPolicy``: parameters stay fp32 when all-gathered, so a
precision changes only compute, as in the other torch modes, and the collectives are an fp32
run's. fp16's GradScaler works on the sharded (DTensor) gradients: DTensor reduces its inf
check over the mesh, so every rank takes or skips a step alike.
``nhwc``: the batches are channels_last, the weights not (``fully_shard`` refuses
non-contiguous parameters in torch 2.13); a convolution follows its input's format.
``compile``: ``torch.compile`` of the sharded root (FSDP2's hooks stay eager), compiled once
for both windows.

The footer's ``param_checksum`` is over the *unsharded* parameters (each DTensor's
``full_tensor()``, a collective): equal on every rank iff the ranks agree. BatchNorm running
statistics are buffers, which FSDP2 neither shards nor synchronises: each rank keeps its own.
"""

from __future__ import annotations

import time

from orchestrator.rankside import harness
from orchestrator.rankside.torch.common import (
    Dims,
    Steps,
    init_distributed,
    input_batches,
    leave_distributed,
    native_window,
    note_device_memory,
    plain_step,
)

from .mode import MODE


def shard_units(model):
    """The submodules given their own ``fully_shard``, in forward order (see the docstring).
    A model with a stack of blocks (an ``nn.ModuleList`` child: the zoo's transformers) shards
    each block, as torchtitan does, and leaves the rest to the root: GPT's and BERT's token
    embedding is also their output layer, whose weight a unit of its own would have resharded
    by the time the output uses it."""
    from torch import nn

    def has_params(m):
        return any(True for _ in m.parameters())

    children = list(model.children())
    stacks = [c for c in children if isinstance(c, nn.ModuleList)]
    if stacks:
        return [block for stack in stacks for block in stack if has_params(block)]
    units = []
    for child in children:
        if isinstance(child, nn.Sequential):
            units += [c for c in child.children() if has_params(c)]
        elif has_params(child):
            units.append(child)
    return units


class CommTimer:
    """Times the collectives FSDP2 issues (see the module docstring). ``window`` ("f" or "b")
    says which phase the training loop is in, so stalls can be taken out of that phase."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.window = "f"
        self.calls = {"ag": 0, "rs": 0}
        self.reset()

    def reset(self) -> None:
        self.total = {"ag": 0.0, "rs": 0.0}
        self.exposed = {"f": 0.0, "b": 0.0}
        self._pending = {}  # CUDA: data_ptr of the collective's buffer -> its record
        self._launched = []  # CUDA: (kind, start event, end event, buffer data_ptr)
        self._stalls = []  # CUDA: (window, event on the compute stream, record waited for)

    def run(self, kind, key, call):
        """Run one collective (``call``), keyed by a buffer FSDP later waits on."""
        import torch

        self.calls[kind] += 1
        if not self.cuda:
            start = time.perf_counter()
            work = call()
            if work is not None:  # an async_op=True request (not made here): finish it now
                work.wait()
            elapsed = time.perf_counter() - start
            self.total[kind] += elapsed
            self.exposed[self.window] += elapsed
            return work
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()  # on FSDP2's all-gather / reduce-scatter stream (the current one here)
        work = call()
        end.record()
        record = (kind, start, end, key.data_ptr())
        self._launched.append(record)
        self._pending[record[3]] = record
        return work

    def reached(self, keys) -> None:
        """CUDA: the compute stream is about to wait for the collectives on these buffers
        (``None``: for every collective still pending)."""
        import torch

        records = (list(self._pending.values()) if keys is None
                   else [self._pending.get(k.data_ptr()) for k in keys])
        records = [r for r in records if r is not None]
        if not records:
            return
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        for r in records:
            self._pending.pop(r[3], None)
        self._stalls += [(self.window, event, r) for r in records]

    def settle(self) -> None:
        """CUDA, after a device synchronize: turn the events into seconds."""
        if not self.cuda:
            return
        for kind, start, end, _ in self._launched:
            self.total[kind] += start.elapsed_time(end) / 1e3
        for window, reach, (_, start, end, _) in self._stalls:
            stall = min(reach.elapsed_time(end), start.elapsed_time(end)) / 1e3
            self.exposed[window] += max(0.0, stall)
        self._launched, self._stalls, self._pending = [], [], {}


def install_timers(model, timer: CommTimer) -> None:
    """Give every FSDP unit timed comm objects; on CUDA also mark the compute stream's waits."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll

    class TimedAllGather(coll.DefaultAllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            return timer.run("ag", output_tensor, lambda: super(TimedAllGather, self).__call__(
                output_tensor, input_tensor, group, async_op))

    class TimedReduceScatter(coll.DefaultReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            return timer.run("rs", input_tensor, lambda: super(TimedReduceScatter, self).__call__(
                output_tensor, input_tensor, group, op, async_op))

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_custom_all_gather(TimedAllGather())
            m.set_custom_reduce_scatter(TimedReduceScatter())
    if timer.cuda:
        _mark_cuda_waits(timer)


def _mark_cuda_waits(timer: CommTimer) -> None:
    """CUDA only: record when the compute stream reaches each place where FSDP2 (torch 2.13)
    makes it wait for a collective. Private internals: an attribute that is missing only loses
    that wait's stall (it then counts as compute), never the run."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

    wait_for_unshard = FSDPParamGroup.wait_for_unshard
    post_backward = FSDPParamGroup.post_backward
    finalize_backward = FSDPParamGroup.finalize_backward

    def timed_wait_for_unshard(self, *a, **kw):
        result = getattr(self, "_all_gather_result", None)
        if result is not None and getattr(result, "all_gather_output", None) is not None:
            timer.reached([result.all_gather_output])
        return wait_for_unshard(self, *a, **kw)

    def timed_post_backward(self, *a, **kw):
        try:  # mirrors the buffer recycling at the top of FSDPParamGroup.post_backward
            ctx = self.comm_ctx
            states, cap = ctx.reduce_scatter_states, ctx.reduce_scatter_max_input_buffers
            if self._param_group_index == self._num_param_groups - 1 and len(states) >= cap:
                timer.reached([s.reduce_scatter_input for s in states[: len(states) - cap + 1]])
        except AttributeError:
            pass
        return post_backward(self, *a, **kw)

    def timed_finalize_backward(self, *a, **kw):
        timer.reached(None)  # the end of backward waits for every collective still in flight
        return finalize_backward(self, *a, **kw)

    FSDPParamGroup.wait_for_unshard = timed_wait_for_unshard
    FSDPParamGroup.post_backward = timed_post_backward
    FSDPParamGroup.finalize_backward = timed_finalize_backward


def full_parameter_checksum(model) -> float:
    """Float64 sum of every *unsharded* parameter (a collective: every rank must call it)."""
    import torch
    from torch.distributed.tensor import DTensor

    total = 0.0
    with torch.no_grad():
        for p in model.parameters():
            full = p.full_tensor() if isinstance(p, DTensor) else p
            total += float(full.detach().double().sum())
    return total


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch", mode="torch-fsdp") as s:
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from orchestrator.rankside.torch.workload import Workload

        torch.manual_seed(0)  # same initial weights everywhere (FSDP2 broadcasts nothing)
        s.footer["versions"] = harness.versions(torch=torch.__version__)
        s.footer["threads"] = torch.get_num_threads()
        info = s.info
        device = init_distributed(args.backend, info)
        dims = Dims(args, device, s.footer)
        workload = Workload(args.model, args.dataset, args.classes)
        workload.note(s.footer)
        model = workload.model.to(device)
        model = dims.prepare(model, nchw_weights="FSDP2 shards only contiguous parameters")
        mesh = init_device_mesh(device.type, (info.world_size,))
        reshard = args.reshard_after_forward == "yes"
        units = shard_units(model)
        for unit in units:
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = workload.loss_fn
        net = dims.compiled(model)
        step = plain_step(net, optimizer, loss_fn, dims)
        s.footer["fsdp_units"] = len(units)
        s.footer["reshard_after_forward"] = reshard
        if args.epochs:  # time to accuracy: whole epochs of FSDP2's own step
            from orchestrator.rankside.torch import epochs as epochs_torch

            epochs_torch.train(s, args, info, step, model, device, dims=dims, workload=workload)
            s.footer["param_checksum"] = full_parameter_checksum(model)
            note_device_memory(s.footer, device)
            leave_distributed()
            return
        source = input_batches(args, info, workload, dims)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        dims.compile_step(step, source, sync)
        native_window(s, source, device, step, sync if device.type == "cuda" else None, dims)

        timer = CommTimer(cuda=device.type == "cuda")
        if info.world_size > 1:  # at world size 1 FSDP2 issues no collective: nothing to time
            install_timers(model, timer)
        seconds = {}

        def timed(window, run):  # a step whose collectives the timer files under ``window``
            def step(value):
                if window == "f":
                    timer.reset()
                timer.window = window
                start = time.perf_counter()
                value = run(value)
                seconds[window] = time.perf_counter() - start
                return value

            return step

        def split(loss):  # forward's and backward's exposed collectives are t_comm
            timer.settle()
            s.add("t_f", seconds["f"] - timer.exposed["f"])
            s.add("t_b", seconds["b"] - timer.exposed["b"])
            s.add("t_comm", timer.exposed["f"] + timer.exposed["b"])
            s.add("t_comm_total", timer.total["ag"] + timer.total["rs"])
            s.add("t_comm_ag", timer.total["ag"])
            s.add("t_comm_rs", timer.total["rs"])
            return loss

        steps = Steps(source, dims, net, loss_fn, optimizer, sync)
        loss = steps.run(s, forward=(None, timed("f", steps.forward)),
                         backward=[(None, timed("b", steps.backward)), (None, split)])
        s.footer["param_checksum"] = full_parameter_checksum(model)
        note_device_memory(s.footer, device)
        s.footer["comm_calls"] = {"all_gather": timer.calls["ag"],
                                  "reduce_scatter": timer.calls["rs"]}
        s.footer["loss"] = float(loss.detach())
        leave_distributed()


if __name__ == "__main__":
    main()
