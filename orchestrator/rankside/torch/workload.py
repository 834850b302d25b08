"""What a PyTorch rank trains: a zoo model, or the user's own (``--model FILE.py:FUNCTION`` or
``--model package.module:FUNCTION``), with its loss and its input batches.

A user's ``FUNCTION()`` returns a ``torch.nn.Module``. Its batches are the module's own
``example_batch(batch_size) -> (inputs, targets)`` where it defines one, else synthetic ones
of the dataset's geometry (``--dataset``: images and labels, or token sequences and their next
tokens); its loss is the module's ``loss(outputs, targets)`` where it defines one, else
cross-entropy. Everything else — both windows, every phase, the run dimensions — is the mode's,
as for a zoo model.

``python -m orchestrator.rankside.torch.workload --check MODEL --dataset D --batch-size B``
is what ``orch sweep`` runs in the torch environment before it submits anything: it builds
the model, runs one training step on a batch of the run's size (forward, loss, backward), and
prints one JSON line: the parameter count, the training FLOPs per sample as
``torch.utils.flop_counter`` counts that step, the file's sha256; or the error as one line
located in the user's file (``file:line: what``), exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import itertools
import json
import os
import re
import sys
import traceback

from orchestrator import zoo

# MODEL is FILE.py:FUNCTION or package.module:FUNCTION (zoo names have no colon).
USER_MODEL = re.compile(r"(?P<target>[^:]+):(?P<function>[A-Za-z_][A-Za-z0-9_]*)\Z")


def is_user_model(name: str) -> bool:
    return ":" in name


class UserModelError(Exception):
    """The user's module cannot be used; the message is one line, located where it can be."""


def _located(exc: BaseException, path: str | None, fallback: str | None = None) -> str:
    """``file:line: Type: message`` at the deepest frame in the user's file; where none is
    in the traceback (a shape mismatch inside torch's own layers), ``fallback`` (the line of
    the user's function), else the last frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if path and os.path.abspath(f.filename) == path]
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{exc.filename}:{exc.lineno}"
    elif mine:
        where = f"{mine[-1].filename}:{mine[-1].lineno}"
    elif fallback:
        where = fallback
    elif frames:
        where = f"{frames[-1].filename}:{frames[-1].lineno}"
    else:
        where = path or "?"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{where}: {type(exc).__name__}: {text}"[:500]


def user_module(name: str):
    """(the imported module, the function's name, the file's path or None) of ``name``."""
    match = USER_MODEL.match(name)
    if match is None:
        raise UserModelError(f"{name}: expected FILE.py:FUNCTION or package.module:FUNCTION")
    target, function = match.group("target"), match.group("function")
    path = None
    try:
        if target.endswith(".py"):
            path = os.path.abspath(target)
            if not os.path.isfile(path):
                raise UserModelError(f"no file {path}")
            spec = importlib.util.spec_from_file_location(
                "orch_user_model_" + re.sub(r"\W", "_", os.path.basename(path)[:-3]), path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except UserModelError:
        raise
    except Exception as exc:  # whatever the user's code raises on import
        raise UserModelError(_located(exc, path)) from None
    if not callable(getattr(module, function, None)):
        where = path or target
        raise UserModelError(f"{where}: defines no function {function}()")
    return module, function, path


class Workload:
    """A rank's model, loss and batches (see the module docstring)."""

    def __init__(self, name: str, dataset: str, classes: int | None = None) -> None:
        self.name = name
        self.dataset = zoo.get_dataset(dataset)
        self.user = is_user_model(name)
        self.example_batch = None
        if self.user:
            module, function, self.path = user_module(name)
            self.where = _where(getattr(module, function), self.path, function)
            self.model = _call(getattr(module, function), self.path, self.where)
            if not _is_module(self.model):
                raise UserModelError(f"{self.path or name}: {function}() returned "
                                     f"{type(self.model).__name__}, not a torch.nn.Module")
            self.example_batch = getattr(module, "example_batch", None)
            user_loss = getattr(module, "loss", None)
            self.loss_fn = user_loss if callable(user_loss) else _default_loss(self.dataset)
            self.objective = "causal-lm" if self.dataset.tokens else "classify"
        else:
            from . import models as models_torch

            self.path = self.where = None
            self.model = models_torch.build(name, dataset, classes)
            self.loss_fn = models_torch.loss_for(name)
            self.objective = zoo.get(name).objective
        self.classes = classes or self.dataset.num_classes

    def synthetic(self, batch_size: int, gen):
        """One synthetic batch ``(inputs, targets)`` of the run's size."""
        import torch

        if self.example_batch is not None:
            return _call(self.example_batch, self.path,
                         _where(self.example_batch, self.path, "example_batch"), batch_size)
        ds = self.dataset
        if ds.tokens:
            from .transformers import lm_pair

            tokens = torch.randint(0, ds.num_classes, (batch_size, ds.seq_len + 1),
                                   generator=gen)
            return lm_pair(tokens, self.objective, gen)
        return (torch.randn((batch_size, *ds.shape_chw), generator=gen),
                torch.randint(0, self.classes, (batch_size,), generator=gen))

    def batches(self, args, info, dims=None):
        """Batches from disk (``--data``: the framework's own loader, prefetch on or off) or,
        by default, a few synthetic batches in host memory cycled, where t_io is only taking
        one. With ``dims`` pinning (``pin_memory=yes`` on a GPU) the batches are in pinned
        memory: the synthetic pool pinned once, the loader's batches pinned by the
        DataLoader."""
        import torch

        pin = dims is not None and dims.pin
        if args.data:
            from . import datasets as datasets_torch

            dl = datasets_torch.loader(args.data, args.dataset, args.batch_size, info.rank,
                                       info.world_size, prefetch=args.prefetch == "yes",
                                       pin_memory=pin, objective=self.objective)
            return datasets_torch.batches(dl)
        gen = torch.Generator().manual_seed(1000 + info.rank)
        pool = [self.synthetic(args.batch_size, gen) for _ in range(4)]
        if pin:
            pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
        return itertools.cycle(pool)

    def note(self, footer: dict) -> None:
        """What the footer keeps of it: a user model's file and parameter count."""
        if self.user:
            footer["user_model"] = {"model": self.name, "file": self.path,
                                    "params": sum(p.numel() for p in self.model.parameters()
                                                  if p.requires_grad)}


def _is_module(obj) -> bool:
    from torch import nn

    return isinstance(obj, nn.Module)


def _where(fn, path, name: str) -> str:
    """``file:line`` of the user's function ``fn`` (its ``def``), for errors with no frame
    of theirs; the function's name when its line cannot be found."""
    import inspect

    try:
        return f"{path or inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]} " \
               f"({name})"
    except (OSError, TypeError):
        return f"{path or '?'} ({name})"


def _call(fn, path, where, *args):
    try:
        return fn(*args)
    except Exception as exc:
        raise UserModelError(_located(exc, path, where)) from None


def _default_loss(ds):
    from torch import nn

    if ds.tokens:
        from .transformers import SequenceCrossEntropy

        return SequenceCrossEntropy()
    return nn.CrossEntropyLoss()


def flop_counter():
    """``torch.utils.flop_counter.FlopCounterMode`` that also counts SDPA on a CPU: torch
    2.13 counts the attention of its flash and memory-efficient GPU kernels but not of the CPU
    one (``_scaled_dot_product_flash_attention_for_cpu``), which it would count as nothing.
    Counted as the GPU kernels are: the two batched matrix products, the causal mask not
    halving them (as PaLM's 12LHQT term counts attention)."""
    import torch
    from torch.utils import flop_counter as fc

    def forward(q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_flop_count(q, k, v)

    def backward(grad, q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad, q, k, v)

    ops = torch.ops.aten
    return fc.FlopCounterMode(display=False, custom_mapping={
        ops._scaled_dot_product_flash_attention_for_cpu: forward,
        ops._scaled_dot_product_flash_attention_for_cpu_backward: backward})


def check(name: str, dataset: str, batch_size: int) -> dict:
    """Build the model and run one training step on CPU (the module docstring)."""
    import torch

    w = Workload(name, dataset)
    gen = torch.Generator().manual_seed(0)
    x, y = w.synthetic(batch_size, gen)
    counter = flop_counter()
    try:
        with counter:
            loss = w.loss_fn(w.model(x), y)
            loss.backward()
    except Exception as exc:
        raise UserModelError(_located(exc, w.path, w.where)) from None
    if not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
        raise UserModelError(f"{w.path or name}: the loss is not a single number "
                             f"({type(loss).__name__} of shape "
                             f"{tuple(getattr(loss, 'shape', ()))})")
    params = sum(p.numel() for p in w.model.parameters() if p.requires_grad)
    digest = None
    if w.path:
        with open(w.path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
    return {"params": int(params), "flops_per_sample": int(counter.get_total_flops()
                                                           // batch_size),
            "sha256": digest, "file": w.path,
            "example_batch": w.example_batch is not None,
            "custom_loss": not isinstance(w.loss_fn, torch.nn.Module)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="check a user's model (orch sweep runs this)")
    p.add_argument("--check", required=True, metavar="MODEL")
    p.add_argument("--dataset", default="cifar")
    p.add_argument("--batch-size", type=int, default=2)
    a = p.parse_args(argv)
    try:
        print(json.dumps(check(a.check, a.dataset, a.batch_size)))
    except UserModelError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
