"""Reference synchronous SGD over mpi4py: the same zoo models as torch-ddp, every gradient
averaged with MPI_Allreduce, gradients merged into buckets of ``--bucket-size`` bytes.

Buckets are filled in reverse parameter order (the order backward produces gradients, as DDP
does); a parameter larger than a bucket is a bucket of its own. Every rank issues the buckets'
collectives in the same order (bucket 0, 1, ...), as MPI requires.

Two windows. The throughput window runs the reference loop as it is, with no phase
timer: forward, ``loss.backward()``, the all-reduce of every bucket, ``optimizer.step()``. The
breakdown window runs the same loop with the phases timed. A bucket's communication is
counted from the start of its packing (the copy into its send buffer) to its completion; the
unpacking (averaging, copying back into the gradients) is part of the update ``t_u``.

``--overlap none`` (CNTK-style): ``loss.backward()`` computes all gradients, then each bucket is
packed and all-reduced in turn with a blocking ``Allreduce``. Nothing is hidden:
``t_comm`` = ``t_comm_total`` = the sum of the buckets' pack + ``Allreduce`` times.

``--overlap wfbp`` (wait-free back-propagation): a ``register_post_accumulate_grad_hook`` on every
parameter marks its gradient ready; when all of a bucket's gradients are ready (and every earlier
bucket has been launched) the bucket is packed and a non-blocking ``Iallreduce`` starts, while
backward goes on with earlier layers. Open MPI progresses non-blocking collectives only inside
MPI calls (there is no progress thread), so each hook also polls the outstanding requests
(``Testsome``), as a real WFBP engine's communication loop would. ``t_b`` is ``loss.backward()``
(compute plus the launches and polls); ``t_comm_total`` the sum over buckets of pack start →
completion (completion as seen by the first ``Testsome``/``Waitany`` that reports it: best
effort, an upper bound); ``t_comm`` the exposed part: from the end of backward to the last
completion (0 if all finished during backward). Every bucket's interval starts before its
completion and the intervals after backward cover that span, so ``t_comm`` <= ``t_comm_total``.

World size 1: there is nothing to all-reduce; the reducer is not used and ``t_comm`` =
``t_comm_total`` = 0.

Run dimensions (``torch_common.Dims``): forward + loss under autocast; under fp16 the scaled
gradients are all-reduced (their average is the scaled average) and the GradScaler unscales,
checks and steps after the exchange: an inf on any rank is in every rank's average, so all
skip the step alike. nhwc: channels_last weights and batches (the buckets copy gradients in
logical order, whatever their strides). compile: ``torch.compile`` of the model; the gradient
hooks stay eager.
"""

from __future__ import annotations

import time

from orchestrator.rankside import harness

from .mode import MODE


class Bucket:
    """Some parameters' gradients, packed into one flat float32 buffer for one all-reduce."""

    def __init__(self, index: int, params: list) -> None:
        import torch

        self.index = index
        self.params = params
        self.numel = sum(p.numel() for p in params)
        self.flat = torch.zeros(self.numel, dtype=params[0].dtype)  # host memory, always
        self.buffer = self.flat.numpy()  # shares memory with self.flat: what MPI sends
        self.reset()

    def reset(self) -> None:
        self.ready = 0
        self.request = None
        self.launched = None
        self.done = None

    def pack(self) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:  # a parameter that took no part in this loss: a zero gradient
                self.flat[offset:offset + n].zero_()
            else:
                self.flat[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n

    def unpack(self, world_size: int) -> None:
        """Gradients := the all-reduced sum / world size (the average every rank applies)."""
        import torch

        self.flat.div_(world_size)
        offset = 0
        for p in self.params:
            n = p.numel()
            view = self.flat[offset:offset + n].view_as(p)
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(view)
            offset += n


def make_buckets(params: list, bucket_bytes: int) -> list[Bucket]:
    """Reverse parameter order, at most ``bucket_bytes`` each (or a single bigger parameter)."""
    buckets: list[Bucket] = []
    current: list = []
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and size + nbytes > bucket_bytes:
            buckets.append(Bucket(len(buckets), current))
            current, size = [], 0
        current.append(p)
        size += nbytes
    if current:
        buckets.append(Bucket(len(buckets), current))
    return buckets


class Allreducer:
    """All-reduces the buckets' gradients, after backward (none) or behind it (wfbp)."""

    def __init__(self, comm, params: list, bucket_bytes: int, overlap: str) -> None:
        self.comm = comm
        self.world_size = comm.Get_size()
        self.overlap = overlap
        self.buckets = make_buckets(params, bucket_bytes)
        self.bucket_of = {id(p): b for b in self.buckets for p in b.params}
        self.total = 0.0  # launch -> completion, summed over buckets, this iteration
        if overlap == "wfbp":
            for p in params:
                p.register_post_accumulate_grad_hook(self._grad_ready)
        self.reset()

    def reset(self) -> None:
        for b in self.buckets:
            b.reset()
        self.next_launch = 0
        self.total = 0.0
        self.exposed = 0.0

    # --- overlap=none ------------------------------------------------------------------------

    def allreduce_all(self) -> None:
        """Pack and all-reduce every bucket in turn (blocking); then :meth:`unpack`."""
        from mpi4py import MPI

        for b in self.buckets:
            start = time.perf_counter()
            b.pack()
            self.comm.Allreduce(MPI.IN_PLACE, b.buffer, op=MPI.SUM)
            self.total += time.perf_counter() - start
        self.exposed = self.total

    def unpack(self) -> None:
        """Every bucket's averaged gradients back into the parameters' ``.grad``."""
        for b in self.buckets:
            b.unpack(self.world_size)

    # --- overlap=wfbp ------------------------------------------------------------------------

    def _grad_ready(self, param) -> None:
        bucket = self.bucket_of[id(param)]
        bucket.ready += 1
        self._launch_ready()
        self._poll()

    def _launch_ready(self, force: bool = False) -> None:
        """Start every bucket whose gradients are all ready, in bucket order (the same order on
        every rank); ``force`` also starts incomplete ones (after backward: unused parameters)."""
        from mpi4py import MPI

        while self.next_launch < len(self.buckets):
            b = self.buckets[self.next_launch]
            if b.ready < len(b.params) and not force:
                return
            b.launched = time.perf_counter()
            b.pack()
            b.request = self.comm.Iallreduce(MPI.IN_PLACE, b.buffer, op=MPI.SUM)
            self.next_launch += 1

    def _outstanding(self) -> list[Bucket]:
        return [b for b in self.buckets if b.request is not None and b.done is None]

    def _poll(self) -> None:
        """Let MPI progress the outstanding all-reduces; timestamp the ones that finished."""
        from mpi4py import MPI

        pending = self._outstanding()
        if not pending:
            return
        done = MPI.Request.Testsome([b.request for b in pending])
        now = time.perf_counter()
        for i in done or ():
            self._finish(pending[i], now)

    def _finish(self, b: Bucket, now: float) -> None:
        b.done = now
        self.total += now - b.launched

    def wait_all(self) -> None:
        """After backward: launch what is left and wait for every bucket (then :meth:`unpack`).
        ``exposed``: from here to the last completion, if any came after."""
        from mpi4py import MPI

        backward_end = time.perf_counter()
        self._launch_ready(force=True)
        pending = self._outstanding()
        while pending:
            i = MPI.Request.Waitany([b.request for b in pending])
            self._finish(pending[i], time.perf_counter())
            pending = self._outstanding()
        last = max((b.done for b in self.buckets if b.done is not None), default=backward_end)
        self.exposed = max(0.0, last - backward_end)

    def exchange(self) -> None:
        """After backward: all gradients all-reduced and averaged, by either method."""
        if self.overlap == "wfbp":
            self.wait_all()
        else:
            self.allreduce_all()
        self.unpack()


def reference_step(dims, net, loss_fn, optimizer, reducer: Allreducer | None):
    """The reference loop's step, ``(x, y) -> (loss, logits)``, as the throughput window and
    epoch runs take it: forward (under autocast), backward through the scaler, the reducer's
    exchange of the gradients, the optimizer's step."""
    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss, logits = dims.forward(net, loss_fn, x, y)
        if reducer:
            reducer.reset()
        dims.backward(loss)
        if reducer:
            reducer.exchange()
        dims.step(optimizer)
        return loss.detach(), logits.detach()

    return step


def breakdown(s, steps, reducer: Allreducer | None, overlap: str):
    """The breakdown window (``steps``: torch_common.Steps): backward, then the reducer's
    wait for its buckets (``wfbp``: launched during backward) or its all-reduce of them all,
    timed inside the reducer (exposed ``t_comm``, every bucket's ``t_comm_total``); the
    update unpacks the averaged buckets first. Returns the last loss."""
    sync = steps.sync
    def reset(loss):
        if reducer:
            reducer.reset()
        return loss

    def exchange(loss):
        if reducer:
            # Timed inside the reducer (the exposed span, every bucket's interval); the
            # wall time of the call beyond the exposed span is the breakdown's phase gap.
            if overlap == "wfbp":
                reducer.wait_all()
            else:
                reducer.allreduce_all()
            sync()
        s.add("t_comm", reducer.exposed if reducer else 0.0)
        s.add("t_comm_total", reducer.total if reducer else 0.0)
        return loss

    def update(loss):
        if reducer:
            reducer.unpack()
        return steps.update(loss)

    return steps.run(s, backward=[(None, reset), ("t_b", steps.backward), (None, exchange)],
                     update=("t_u", update))


def train_epochs(s, args, step, model, device, dims, comm, MPI, workload=None) -> None:
    """Time to accuracy: whole epochs of the labelled set, the ranks' sums all-reduced over
    MPI; then the footer's checksum and memory, and MPI finalized as at the end of main."""
    from orchestrator.rankside.torch import epochs as epochs_torch
    from orchestrator.rankside.torch.common import note_device_memory, parameter_checksum

    def summed(t):
        comm.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)
        return t

    epochs_torch.train(s, args, s.info, step, model, device, reduce=summed, dims=dims,
                       workload=workload)
    s.footer["param_checksum"] = parameter_checksum(model)
    note_device_memory(s.footer, device)
    comm.Barrier()
    MPI.Finalize()


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    if args.bucket_size < 1:
        raise SystemExit("--bucket-size must be at least 1")
    with harness.rank_log(args, framework="torch-mpi", mode="mpi-ssgd") as s:
        import mpi4py

        # The autograd hooks call MPI from the thread running backward (the caller's, on CPU),
        # never two threads at once.
        mpi4py.rc.thread_level = "serialized"
        import torch
        from mpi4py import MPI

        from orchestrator.rankside.torch.common import (
            Dims,
            measure,
            rank_device,
        )
        from orchestrator.rankside.torch.workload import Workload

        comm = MPI.COMM_WORLD
        info = s.info
        if comm.Get_rank() != info.rank or comm.Get_size() != info.world_size:
            raise RuntimeError(f"MPI says rank {comm.Get_rank()} of {comm.Get_size()}, the "
                               f"launcher rank {info.rank} of {info.world_size}")
        # GPU nodes compute on the rank's GPU; the all-reduce stays on host buffers (a
        # reference implementation: no CUDA-aware MPI assumed), so t_comm includes the copies.
        device = rank_device(info.local_rank)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        dims = Dims(args, device, s.footer)
        torch.manual_seed(0)
        library = MPI.Get_library_version().split(",")[0].strip("\x00 \n")  # "Open MPI v4.1.4"
        s.footer["versions"] = harness.versions(torch=torch.__version__,
                                                mpi4py=mpi4py.__version__, mpi=library)
        s.footer["threads"] = torch.get_num_threads()
        workload = Workload(args.model, args.dataset, args.classes)
        workload.note(s.footer)
        model = workload.model
        with torch.no_grad():  # everyone starts from rank 0's weights
            for p in model.parameters():
                comm.Bcast(p.data.numpy(), root=0)
        model = dims.prepare(model.to(device))
        net = dims.compiled(model)
        params = [p for p in model.parameters() if p.requires_grad]
        # One rank: nothing to all-reduce (and no hooks registered).
        reducer = (Allreducer(comm, params, args.bucket_size, args.overlap)
                   if info.world_size > 1 else None)
        s.footer["comm_buckets"] = len(reducer.buckets) if reducer else 0
        s.footer["overlap"] = args.overlap
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = workload.loss_fn

        step = reference_step(dims, net, loss_fn, optimizer, reducer)

        if args.epochs:  # time to accuracy: DistributedSampler shares, as torch-ddp
            train_epochs(s, args, step, model, device, dims, comm, MPI, workload)
            return

        measure(s, args, workload, dims, device, step, sync, net, loss_fn, optimizer, model,
                lambda steps: breakdown(s, steps, reducer, args.overlap))
        comm.Barrier()
        # The harness ends the process with os._exit (no atexit): finalize MPI here, or mpirun
        # reports a rank that "exited without calling finalize" and fails the job.
        MPI.Finalize()


if __name__ == "__main__":
    main()
