"""Rank-side helpers shared by the PyTorch modes (torch-ddp, torch-fsdp, mpi-ssgd, horovod):
joining the process group, the parameter checksum every synchronous mode ends with, the input
batches, and the throughput window's plain loop (two windows: samples/s comes from the framework's
own step, the phases from a second, instrumented window)."""

from __future__ import annotations


def rank_device(local_rank: int, needs_gpu: bool = False):
    """This rank's device: a GPU wherever CUDA is present, else the CPU.

    ``needs_gpu``: the collectives reduce only CUDA tensors (NCCL): no GPU is then an error,
    not a silent CPU run. Gloo reduces host and CUDA tensors alike, so on a GPU node a Gloo run
    computes on the GPU as the same script under NCCL would, and only its collectives differ
    (``CUDA_VISIBLE_DEVICES=`` keeps a run on the CPU). Ranks share the node's GPUs
    round-robin (``local_rank % count``): two ranks on one GPU is how a one-GPU machine runs a
    two-rank Gloo job (NCCL refuses two ranks on one device, so its launch takes one rank per
    GPU)."""
    import torch

    if not torch.cuda.is_available():
        if needs_gpu:
            raise RuntimeError("backend nccl needs a GPU and torch.cuda.is_available() is False "
                               "here: use -o backend=gloo on CPU partitions")
        return torch.device("cpu")
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_distributed(backend: str, info):
    """Join the job's process group (env:// rendezvous from RANK/WORLD_SIZE/MASTER_*) and
    return this rank's device (:func:`rank_device`)."""
    from datetime import timedelta

    import torch.distributed as dist

    device = rank_device(info.local_rank, needs_gpu=backend == "nccl")
    dist.init_process_group(backend, rank=info.rank, world_size=info.world_size,
                            timeout=timedelta(minutes=5))
    return device


def leave_distributed() -> None:
    """Leave the process group together: a rank that destroyed its group while a peer is
    still in the last collective would fail that peer."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def comm_delay_s(args) -> float:
    """Seconds each all-reduce is held back (``comm_delay_ms``, a test aid: 0 elsewhere)."""
    return getattr(args, "comm_delay_ms", 0) / 1000.0


def delayed_allreduce(world_size: int, delay_s: float):
    """A DDP comm hook doing what DDP does by default (all-reduce, average) whose every bucket
    completes ``delay_s`` late: the slow fabric of ``comm_delay_ms`` in a plain DDP step."""
    import time

    import torch.distributed as dist

    def hook(state, bucket):  # signature required by register_comm_hook
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def finished(f):
            time.sleep(delay_s)
            return f.value()[0].div_(world_size)

        return fut.then(finished)

    return hook


def note_device_memory(footer: dict, device) -> None:
    """Peak GPU memory of this rank into its footer where it computes on a GPU:
    ``peak_device_bytes``, PyTorch's allocator's peak of memory held by tensors since the
    process began (what the survey paper compares), and ``peak_device_reserved_bytes``, the
    peak the caching allocator held from the device (what ``nvidia-smi`` sees, what runs out);
    and the device's name (``device_name``), which the peak FLOP/s of MFU is looked up by. On a
    CPU the footer's ``peak_rss_bytes`` is the rank's peak memory."""
    if device.type == "cuda":
        import torch

        footer["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(device))
        footer["peak_device_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
        footer["device_name"] = torch.cuda.get_device_name(device)


def parameter_checksum(model) -> float:
    """Sum of all parameters in float64: equal on every rank iff the ranks stayed in sync."""
    import torch

    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


def input_batches(args, info, workload, dims=None):
    """The rank's batches: :meth:`workload.Workload.batches` (from disk with ``--data``, else
    a few synthetic batches in host memory cycled)."""
    return workload.batches(args, info, dims)


# Autocast's dtype per precision; fp32 and tf32 compute without autocast.
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


class Dims:
    """This rank's run dimensions (``precision``, ``memory_format``, ``compile``,
    ``pin_memory``, ``cudnn_benchmark``: declared once in
    :mod:`orchestrator.modes.torch_options`), applied the way PyTorch's own documentation
    writes them:

    * :meth:`autocast` around forward and loss (``torch.autocast(device_type, dtype)``; a
      disabled one for fp32/tf32), and :attr:`scaler`, a ``torch.amp.GradScaler`` enabled for
      fp16 only (a disabled scaler passes ``scale``/``step``/``update`` through, so one step
      serves every precision, as PyTorch's AMP recipe writes it);
    * ``tf32``: ``torch.backends.cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32`` on; every
      other precision sets both off (cuDNN's default is on: fp32 convolutions would silently
      run in TF32). The flags only act on CUDA: on a CPU tf32 is fp32 (the footer says so);
    * :meth:`prepare` the model (``channels_last`` for nhwc), :meth:`compiled` a module
      (``torch.compile(module, mode=...)``), :meth:`to_device` a batch (non-blocking from
      pinned memory, channels_last for nhwc).

    What the rank did is written to ``footer`` as it becomes known: the values, where a
    value changed nothing here (``*_note``), the compile time (``t_compile``) and what the
    forward really computed in (``activation_dtype``, ``input_channels_last``)."""

    def __init__(self, args, device, footer: dict) -> None:
        import torch

        self.device = device
        self.footer = footer
        self.precision = args.precision
        name = AUTOCAST_DTYPES.get(args.precision)
        self.dtype = getattr(torch, name) if name else None
        self.channels_last = args.memory_format == "nhwc"
        self.compile_mode = None if args.compile == "no" else args.compile
        cuda = device.type == "cuda"
        self.pin = args.pin_memory == "yes" and cuda
        self.scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
        tf32 = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        # Set either way: the rank's value is the run's, whatever a library left there.
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "yes"
        self._seen = False
        footer.update(precision=args.precision, memory_format=args.memory_format,
                      compile=args.compile, pin_memory=args.pin_memory,
                      cudnn_benchmark=args.cudnn_benchmark,
                      autocast_dtype=str(self.dtype).replace("torch.", "") if name else None,
                      grad_scaler=self.scaler.is_enabled())
        if tf32 and not cuda:
            footer["precision_note"] = "tf32 is fp32 on a CPU (TF32 is a GPU tensor-core format)"
        if args.pin_memory == "yes" and not cuda:
            footer["pin_memory_note"] = "no-op on a CPU: batches are not copied to a device"
        if args.cudnn_benchmark == "yes" and not cuda:
            footer["cudnn_benchmark_note"] = "no-op on a CPU: cuDNN runs on NVIDIA GPUs only"

    @property
    def amp(self) -> bool:
        """Mixed precision: the step needs autocast (and, for fp16, the scaler)."""
        return self.dtype is not None

    @property
    def moves(self) -> bool:
        """A batch's copy to the device differs from a plain ``.to(device)``."""
        return self.pin or self.channels_last

    def autocast(self):
        """The forward + loss context: autocast to bf16/fp16, or a disabled one."""
        import torch

        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None)

    def prepare(self, model, nchw_weights: str | None = None):
        """The model in the run's memory format (before any wrapper: DDP, fully_shard).
        ``nchw_weights``: why the framework needs contiguous parameters (FSDP2 shards,
        Horovod sends only contiguous tensors): the weights then stay NCHW and only the
        batches are channels_last. A convolution follows its input's format (PyTorch picks
        channels_last when input or weight is), so it still runs NHWC; its weight gradient
        takes the weight's strides (autograd's gradient layout contract)."""
        import torch

        if not self.channels_last:
            return model
        if not any(p.dim() == 4 for p in model.parameters()):
            self.footer["memory_format_note"] = (
                "the model has no 4-D tensor (a transformer on tokens): nhwc changes nothing")
            return model
        if nchw_weights:
            self.footer["memory_format_note"] = (
                f"weights NCHW ({nchw_weights}), batches channels_last")
            return model
        return model.to(memory_format=torch.channels_last)

    def compiled(self, module):
        """``torch.compile(module, mode=...)`` when the run compiles, else the module."""
        if self.compile_mode is None:
            return module
        import torch

        return torch.compile(module, mode=self.compile_mode)

    def to_device(self, x, y):
        """A batch on the device: non-blocking from pinned memory, channels_last for nhwc."""
        import torch

        fmt = torch.channels_last if self.channels_last and x.dim() == 4 else (
            torch.preserve_format)
        return (x.to(self.device, non_blocking=self.pin, memory_format=fmt),
                y.to(self.device, non_blocking=self.pin))

    def compile_step(self, step, source, sync=None, key: str = "t_compile") -> None:
        """When compiling: one step outside every window, timed (``footer[key]``, seconds).
        The first call of a compiled module compiles its forward and backward, so no window,
        warm-up or measured, holds the compilation, whatever ``--warmup`` is. Every rank
        runs it (a training step: its collectives must match)."""
        if self.compile_mode is None:
            return
        import time

        x, y = self.to_device(*next(source))
        start = time.perf_counter()
        step(x, y)
        if sync is not None:
            sync()
        self.footer[key] = time.perf_counter() - start

    def forward(self, net, loss_fn, x, y):
        """Forward and loss under the run's autocast; returns ``(loss, logits)``."""
        with self.autocast():
            logits = net(x)
            return loss_fn(logits, y), logits

    def backward(self, loss) -> None:
        """``loss.backward()``, through the scaler (fp16 scales the loss; else a no-op)."""
        self.scaler.scale(loss).backward()

    def step(self, optimizer, unscale: bool = False, inside=None) -> None:
        """``optimizer.step()`` through the scaler, then the scaler's update (a disabled one
        passes both through). ``unscale``: the gradients were averaged outside the optimizer's
        step (Horovod's ``synchronize()``) and are unscaled first, as Horovod's AMP recipe
        writes it; ``inside``: a context manager around the step (its
        ``skip_synchronize()``)."""
        if unscale and self.scaler.is_enabled():
            self.scaler.unscale_(optimizer)
        if inside is None:
            self.scaler.step(optimizer)
        else:
            with inside():
                self.scaler.step(optimizer)
        self.scaler.update()

    def saw(self, x, logits) -> None:
        """Record, once, what the forward computed in: the logits' dtype (bfloat16 under bf16
        autocast) and whether the input batch was channels_last."""
        if self._seen or logits is None:
            return
        import torch

        self._seen = True
        self.footer["activation_dtype"] = str(logits.dtype).replace("torch.", "")
        if x is not None:
            self.footer["input_channels_last"] = bool(
                x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last))


def native_window(s, source, device, step, sync=None, dims=None):
    """The throughput window (``window: native``) of a PyTorch mode: per iteration, take the
    next batch, move it to the device and run ``step(x, y)`` — the mode's plain training step
    as the framework's documentation writes it (forward, ``loss.backward()``,
    ``optimizer.step()``), with no hook, timer or phase inside. Only the harness' wall clock
    surrounds it. ``step(x, y)`` returns ``(loss, logits)`` (an epoch run reads both);
    returns the last loss. ``dims``: the run's :class:`Dims` moves the batches (pinned,
    channels_last) and, after the window, records the last forward's dtypes.

    ``sync`` (on a GPU, ``torch.cuda.synchronize``): the window is a queued one
    (harness ``drain``). PyTorch's loop never waits for its kernels, so the host queues the
    next step while the GPU still runs the last; a synchronize after every step, as here
    before, would take that overlap away and report less than the framework gets. The harness
    synchronizes at the warm-up's end, after every chunk and at the window's end instead."""
    loss = logits = x = None
    if dims is None or not dims.moves:  # the plain copy: nothing pinned, nothing reordered
        for _ in s.native_iterations(drain=sync):
            x, y = next(source)
            loss, logits = step(x.to(device), y.to(device))
    else:
        for _ in s.native_iterations(drain=sync):
            x, y = dims.to_device(*next(source))
            loss, logits = step(x, y)
    if dims is not None:
        dims.saw(x, logits)
    return loss


def plain_step(model, optimizer, loss_fn, dims=None):
    """The plain loop's step: ``zero_grad``, forward + loss, ``backward``, ``step``; returns
    ``(loss, logits)``, detached (the throughput window and epoch runs step the same way).
    With ``dims``, PyTorch's AMP recipe: forward + loss under autocast, then
    ``scaler.scale(loss).backward()``, ``scaler.step(optimizer)``, ``scaler.update()`` (a
    disabled scaler, every precision but fp16, makes these backward and ``optimizer.step()``)."""
    if dims is None or not dims.amp:  # fp32/tf32: the loop exactly as the docs write it
        def step(x, y):
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            return loss.detach(), logits.detach()

        return step

    def amp_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss, logits = dims.forward(model, loss_fn, x, y)
        dims.backward(loss)
        dims.step(optimizer)
        return loss.detach(), logits.detach()

    return amp_step


def measure(s, args, workload, dims, device, step, sync, net, loss_fn, optimizer, model,
            breakdown) -> None:
    """The end of an MPI mode's rank (horovod, mpi-ssgd): its input, the throughput window
    (:func:`native_window` of ``step``), the breakdown window (``breakdown(steps)`` over
    :class:`Steps`, the mode's own; returns the last loss), then the footer's parameter
    checksum, device memory and loss. The caller leaves its communicator after it."""
    # The same input as torch-ddp: synthetic batches in memory, or --data from disk.
    source = input_batches(args, s.info, workload, dims)
    dims.compile_step(step, source, sync)
    native_window(s, source, device, step, sync if device.type == "cuda" else None, dims)

    steps = Steps(source, dims, net, loss_fn, optimizer, sync)
    loss = breakdown(steps)
    s.footer["param_checksum"] = parameter_checksum(model)
    note_device_memory(s.footer, device)
    s.footer["loss"] = float(loss.detach())


class Steps:
    """The breakdown window of a PyTorch mode, declared as steps for
    :meth:`harness.Session.breakdown`: ``t_io`` (the next batch), ``t_h2d`` (to the device, in
    the run's memory format), ``t_f`` (forward + loss under autocast), ``t_b`` (backward
    through the scaler), ``t_u`` (the scaler's optimizer step and update, ``zero_grad``). Every
    run dimension is applied here and in :class:`Dims`, so a mode's rank replaces only the
    steps where its communication happens (DDP's hooked backward, Horovod's
    ``synchronize()``), built from the same :class:`Dims` calls.

    Each step ends with ``sync`` (``torch.cuda.synchronize`` on a GPU) so its phase holds its
    kernels. A step receives the previous one's result: the batch, then the loss."""

    def __init__(self, source, dims, net, loss_fn, optimizer, sync) -> None:
        self.source = source
        self.dims = dims
        self.net = net
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.sync = sync

    def io(self, _it):
        return next(self.source)

    def h2d(self, batch):
        x, y = self.dims.to_device(*batch)
        self.sync()
        return x, y

    def forward(self, batch):
        loss, _ = self.dims.forward(self.net, self.loss_fn, *batch)
        self.sync()
        return loss

    def backward(self, loss):
        self.dims.backward(loss)
        self.sync()
        return loss

    def update(self, loss):
        self.dims.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        self.sync()
        return loss

    def run(self, s, forward=None, backward=None, update=None):
        """Run the breakdown window on ``s`` (the rank's :class:`harness.Session`); return the
        last loss. ``forward``, ``backward``, ``update``: a mode's own ``(phase, step)`` pairs
        in place of that default step (a list for several)."""
        def pairs(mine, default):
            if mine is None:
                return [default]
            return list(mine) if isinstance(mine, list) else [mine]

        steps = [("t_io", self.io), ("t_h2d", self.h2d)]
        steps += pairs(forward, ("t_f", self.forward))
        steps += pairs(backward, ("t_b", self.backward))
        steps += pairs(update, ("t_u", self.update))
        return s.breakdown(steps)
