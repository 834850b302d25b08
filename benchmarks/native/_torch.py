"""What the native PyTorch scripts share: the same synthetic batches as orch's ranks
(rankside.torch.common.input_batches without --data), so both sides feed identical tensors,
the rank's device as PyTorch's DDP tutorial picks it, and the timed loop around each script's
own step."""

import itertools
import os
import sys

import torch
import torch.distributed as dist

from benchmarks.native._common import Clock, report
from orchestrator import zoo
from orchestrator.modes.torch_options import RUN_DIMENSIONS
from orchestrator.rankside.torch import common as torch_common
from orchestrator.rankside.torch import models as models_torch

# The run dimensions a native twin reads from orch's rank arguments, with orch's defaults (a
# run at a default leaves its flag out), from their one declaration.
DIMENSION_FLAGS = tuple((o.flag, o.default) for o in RUN_DIMENSIONS)


def synthetic_batches(args, rank, pin=False):
    """The same input as orch's ranks: four synthetic batches in host memory, cycled (in
    pinned memory with ``pin``, as a DataLoader's ``pin_memory=True`` gives them). A token
    dataset's batch is nanoGPT's: ``seq_len + 1`` random tokens per sample, the inputs all but
    the last, the targets all but the first."""
    gen = torch.Generator().manual_seed(1000 + rank)
    ds = zoo.get_dataset(args.dataset)
    if ds.tokens:
        def batch():
            seq = torch.randint(0, ds.num_classes, (args.batch_size, ds.seq_len + 1),
                                generator=gen)
            return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

        pool = [batch() for _ in range(4)]
        if pin:
            pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
        return itertools.cycle(pool)
    shape = (args.batch_size, *models_torch.input_shape(args.dataset))
    classes = models_torch.num_classes(args.dataset)
    pool = [(torch.randn(shape, generator=gen),
             torch.randint(0, classes, (shape[0],), generator=gen)) for _ in range(4)]
    if pin:
        pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
    return itertools.cycle(pool)


class Recipe:
    """The run dimensions as PyTorch's own recipes write them, read from the rank arguments
    (``DIMENSION_FLAGS``), written here from the recipes and not taken from orch's rank code,
    so that a mistake there shows as a fidelity gap rather than being copied:

    * the AMP recipe: ``torch.autocast(device_type, dtype)`` around forward and loss, and for
      fp16 a ``torch.amp.GradScaler``: ``scaler.scale(loss).backward()``,
      ``scaler.step(optimizer)``, ``scaler.update()``;
    * TF32 as the CUDA semantics page sets it (``torch.backends.cuda.matmul.allow_tf32``,
      ``torch.backends.cudnn.allow_tf32``), on for tf32 only: every other precision sets both
      off, as orch's ranks do (cuDNN's own default would run fp32 convolutions in TF32);
    * the channels_last tutorial: ``model.to(memory_format=torch.channels_last)`` and each
      input ``x.to(device, memory_format=torch.channels_last)`` (``weights_nchw``: the
      framework needs contiguous parameters, FSDP2's shards, so only the inputs are);
    * pinned memory with ``non_blocking=True`` copies, ``torch.backends.cudnn.benchmark``, and
      ``torch.compile(model, mode=...)`` (its first calls, in the warm-up, compile)."""

    def __init__(self, args, device):
        self.device = device
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
        self.scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.benchmark = args.cudnn_benchmark == "yes"
        self.channels_last = args.memory_format == "nhwc"
        self.pin = args.pin_memory == "yes" and device.type == "cuda"
        self.compile_mode = None if args.compile == "no" else args.compile

    def model(self, model, weights_nchw=False):
        if self.channels_last and not weights_nchw:
            return model.to(memory_format=torch.channels_last)
        return model

    def compiled(self, module):
        return module if self.compile_mode is None else torch.compile(module,
                                                                      mode=self.compile_mode)

    def to_device(self, x, y):
        fmt = torch.channels_last if self.channels_last and x.dim() == 4 else (
            torch.preserve_format)
        return (x.to(self.device, non_blocking=self.pin, memory_format=fmt),
                y.to(self.device, non_blocking=self.pin))

    def step(self, model, optimizer, loss_fn):
        """The step of the AMP recipe; with no autocast dtype and no scaler, the plain loop."""
        if self.dtype is None and not self.scaler.is_enabled():
            return plain_step(model, optimizer, loss_fn)
        scaler = self.scaler

        def step(x, y):
            optimizer.zero_grad()
            with torch.autocast(self.device.type, dtype=self.dtype,
                                enabled=self.dtype is not None):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        return step


def loss_function(args):
    """The loss the model's own recipe writes: cross-entropy of the labels, or nanoGPT's
    ``F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))`` for a language
    model's token logits."""
    if not zoo.get_dataset(args.dataset).tokens:
        return torch.nn.CrossEntropyLoss()

    def lm_loss(logits, targets):
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)),
                                                 targets.view(-1))

    return lm_loss


def device_for_rank():
    """The tutorial's ``device_id`` from ``LOCAL_RANK``, placed by orch's own rule
    (rankside.torch.common.rank_device: GPU LOCAL_RANK modulo the node's GPUs wherever CUDA
    is, else the CPU), so twin and rank always compute on the same device."""
    return torch_common.rank_device(int(os.environ.get("LOCAL_RANK", "0")))


def plain_step(model, optimizer, loss_fn):
    """The step PyTorch's tutorials write: zero_grad, forward + loss, backward, step."""

    def step(x, y):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def run(mode, args, rank, step, device=None, recipe=None):
    """``--warmup`` + ``--iters`` calls of ``step(x, y)``, the batch moved to ``device`` (the
    CPU by default; by ``recipe.to_device`` where a :class:`Recipe` is given); print the task's
    JSON line. On a GPU the loop never waits for its kernels, as the tutorial's does not: the
    device is synchronized only where the measured steps begin and end, so the window holds
    all of their work (each step's own time is then only how long it took to queue)."""
    device = device or torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    batches = synthetic_batches(args, rank, pin=recipe is not None and recipe.pin)
    move = recipe.to_device if recipe is not None else (
        lambda x, y: (x.to(device), y.to(device)))
    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        if k == args.warmup:
            sync()
        clock.step(k)
        step(*move(*next(batches)))
    sync()
    report(mode, rank, args.iters * args.batch_size, clock.done(), clock.steps())


def leave():
    """End a torch.distributed script: leave the process group together, then the process
    without interpreter teardown, as orch's ranks do (harness.rank_log): with Gloo's threads
    still alive teardown can abort ("terminate called without an active exception", a native
    twin's exit status 134 after it had reported), failing a finished job."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)
