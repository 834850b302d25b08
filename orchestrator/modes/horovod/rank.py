"""PyTorch + Horovod rank: ``hvd.DistributedOptimizer`` over MPI, zoo model, synthetic data.

Two windows. The throughput window runs the loop as Horovod's documentation writes
it: ``optimizer.zero_grad()``, forward, ``loss.backward()``, ``optimizer.step()`` (which
synchronizes), timed by wall clock only. The breakdown window splits the same step:

How communication is separated from backward: Horovod's optimizer hooks every gradient; during
``loss.backward()`` each hook only *enqueues* an asynchronous all-reduce, which Horovod's
background thread fuses (tensor fusion) and runs while backward goes on. ``t_b`` is
``loss.backward()``. The wait for whatever is not done by then happens in
``optimizer.synchronize()``: that is the exposed communication ``t_comm`` (it includes the
averaging of the last fused tensors). ``t_u`` is ``optimizer.step()`` under
``optimizer.skip_synchronize()`` (the gradients are already averaged) plus ``zero_grad``.

Total communication is not seen: Horovod's background thread does not report each
all-reduce's duration to the rank (its timeline, HOROVOD_TIMELINE, has it, as a trace of the
whole process, not per iteration), so ``t_comm_total`` is not recorded and the footer's
``comm_total_reason`` says why.

Run dimensions (``torch_common.Dims``): forward + loss under autocast; fp16 follows Horovod's
AMP recipe (``scaler.scale(loss).backward()``, ``optimizer.synchronize()``,
``scaler.unscale_``, ``scaler.step`` under ``optimizer.skip_synchronize()``, ``scaler.update()``:
the averaged gradients are unscaled, never ones still in flight). nhwc: channels_last batches,
NCHW weights (Horovod broadcasts and all-reduces only contiguous tensors); compile:
``torch.compile`` of the model (Horovod's gradient hooks stay eager).

World size 1: Horovod still passes every gradient through its background thread (a one-member
all-reduce, a copy) and ``synchronize()`` waits for its next cycle (HOROVOD_CYCLE_TIME): that
wait is Horovod's overhead, not communication. It is recorded as ``t_sync`` and counted in
``t_u``; ``t_comm`` = ``t_comm_total`` = 0.
"""

from __future__ import annotations

import time

from orchestrator import protocol
from orchestrator.rankside import harness

from .mode import MODE


def join_horovod(hvd, info) -> None:
    """``hvd.init()``, and make sure Horovod sees the launcher's rank and runs on MPI."""
    hvd.init()
    if hvd.rank() != info.rank or hvd.size() != info.world_size:
        raise RuntimeError(f"Horovod says rank {hvd.rank()} of {hvd.size()}, the launcher "
                           f"rank {info.rank} of {info.world_size}")
    if not hvd.mpi_enabled():
        raise RuntimeError("Horovod is not running on MPI (the Gloo controller was picked): "
                           "start the ranks with mpirun or srun --mpi=pmix")


def training_step(dims, net, loss_fn, optimizer):
    """The step of the throughput window and of epoch runs, ``(x, y) -> (loss, logits)``:
    Horovod's own example loop, or under autocast its AMP recipe (the averaged gradients
    unscaled, never ones still in flight)."""
    def documented_step(x, y):  # Horovod's own example loop (logits kept for epochs)
        optimizer.zero_grad()
        logits = net(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        return loss.detach(), logits.detach()

    def amp_step(x, y):  # the same under autocast; fp16 as Horovod's AMP recipe writes it
        optimizer.zero_grad()
        loss, logits = dims.forward(net, loss_fn, x, y)
        dims.backward(loss)
        optimizer.synchronize()  # every gradient averaged before it is unscaled
        dims.step(optimizer, unscale=True, inside=optimizer.skip_synchronize)
        return loss.detach(), logits.detach()

    return amp_step if dims.amp else documented_step


def breakdown(s, steps, alone: bool):
    """The breakdown window (``steps``: torch_common.Steps over Horovod's optimizer): backward
    enqueues the all-reduces; ``optimizer.synchronize()`` waits for what backward did not hide
    (exposed ``t_comm``, or ``t_sync`` at world size 1); the step then skips Horovod's own
    synchronize. Returns the last loss."""
    optimizer, dims, sync = steps.optimizer, steps.dims, steps.sync
    waited = [0.0]

    def synchronize(loss):  # the wait for the all-reduces backward did not hide
        start = time.perf_counter()
        optimizer.synchronize()
        sync()
        waited[0] = time.perf_counter() - start
        # One rank: no communication; Horovod's cycle wait is update overhead (t_sync).
        s.add("t_sync" if alone else "t_comm", waited[0])
        return loss

    def update(loss):
        dims.step(optimizer, unscale=True, inside=optimizer.skip_synchronize)
        # Horovod's zero_grad() takes no set_to_none (torch's default is True anyway).
        optimizer.zero_grad()
        sync()
        return loss

    def alone_update(loss):  # ... counted in t_u at world size 1
        s.add("t_u", waited[0])
        s.add("t_comm_total", 0.0)
        return loss

    return steps.run(s, backward=[("t_b", steps.backward), (None, synchronize)],
                     update=[("t_u", update), *([(None, alone_update)] if alone else [])])


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch-mpi", mode="horovod") as s:
        import horovod
        import horovod.torch as hvd
        import torch

        from orchestrator.rankside.torch.common import (
            Dims,
            measure,
            note_device_memory,
            parameter_checksum,
            rank_device,
        )
        from orchestrator.rankside.torch.workload import Workload

        info = s.info
        join_horovod(hvd, info)
        device = rank_device(hvd.local_rank())  # GPU ops: Horovod's NCCL
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        dims = Dims(args, device, s.footer)
        torch.manual_seed(0)
        s.footer["versions"] = harness.versions(torch=torch.__version__,
                                                horovod=horovod.__version__)
        s.footer["threads"] = torch.get_num_threads()
        s.footer["controller"] = "mpi"
        workload = Workload(args.model, args.dataset, args.classes)
        workload.note(s.footer)
        model = dims.prepare(workload.model.to(device),
                             nchw_weights="Horovod sends only contiguous tensors")
        net = dims.compiled(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        # Everyone starts from rank 0's weights and optimizer state.
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        optimizer = hvd.DistributedOptimizer(optimizer,
                                             named_parameters=model.named_parameters(),
                                             op=hvd.Average)
        loss_fn = workload.loss_fn

        step = training_step(dims, net, loss_fn, optimizer)

        if args.epochs:  # time to accuracy: DistributedSampler shares, as Horovod's
            from orchestrator.rankside.torch import epochs as epochs_torch  # examples shard


            epochs_torch.train(s, args, info, step, model, device,
                               reduce=lambda t: hvd.allreduce(t, op=hvd.Sum, name="held_out"),
                               dims=dims, workload=workload)
            s.footer["param_checksum"] = parameter_checksum(model)
            note_device_memory(s.footer, device)
            hvd.join()
            hvd.shutdown()  # as at the end below
            return

        alone = info.world_size == 1
        if not alone:  # one rank: none to see (t_comm_total = 0)
            s.footer[protocol.COMM_TOTAL_REASON] = (
                "Horovod runs its all-reduces in a background thread that reports no "
                "per-tensor durations to the rank (only its process-wide timeline has them)")
        measure(s, args, workload, dims, device, step, sync, net, loss_fn, optimizer, model,
                lambda steps: breakdown(s, steps, alone))
        hvd.join()
        # The harness ends the process with os._exit (no atexit): shut Horovod down (it
        # finalizes the MPI it initialized), or mpirun reports a rank that "exited without
        # calling finalize" and fails the job.
        hvd.shutdown()


if __name__ == "__main__":
    main()
