"""Layer-wise trace of a PyTorch model, in the source paper's format (rank side).

One row per leaf module in forward order: ``id,name,forward_us,backward_us,comm_us,size_bytes``
plus a ``data`` row whose forward time is the input time. Measured after the benchmark's
measured window, so the hooks never perturb it:

- forward_us: forward pre/post hooks around each leaf module;
- backward_us: backward runs under DDP's ``no_sync()`` (pure compute); a layer's backward ends
  when the last of its parameters' gradients is accumulated; its time is the gap since the
  previous such event in backward order (a layer without parameters has none: its backward
  time is counted in the next layer with parameters in backward order, the one before it);
- comm_us: a blocking all-reduce of that layer's gradients alone (what sending that layer
  costs on this fabric, at this world size); size_bytes: their size. A layer without
  parameters sends nothing (comm_us 0, size_bytes 0).
"""

from __future__ import annotations

import csv
import time


def trace(ddp, model, loss_fn, source, iters: int = 3) -> list[dict]:
    import torch
    import torch.distributed as dist

    leaves = [(name, m) for name, m in model.named_modules()
              if name and not list(m.children())]
    params = {name: [p for p in m.parameters(recurse=False) if p.requires_grad]
              for name, m in leaves}
    fwd = {name: 0.0 for name, _ in leaves}
    bwd = {name: 0.0 for name, _ in leaves}
    comm = {name: 0.0 for name, _ in leaves}
    t_io = 0.0
    started: dict[str, float] = {}
    ready: dict[str, float] = {}
    handles = []
    for name, module in leaves:
        handles.append(module.register_forward_pre_hook(
            lambda _m, _i, n=name: started.__setitem__(n, time.perf_counter())))
        handles.append(module.register_forward_hook(
            lambda _m, _i, _o, n=name: fwd.__setitem__(
                n, fwd[n] + time.perf_counter() - started[n])))
        for p in params[name]:
            handles.append(p.register_post_accumulate_grad_hook(
                lambda _p, n=name: ready.__setitem__(n, time.perf_counter())))
    try:
        for _ in range(iters):
            t0 = time.perf_counter()
            x, y = next(source)
            t_io += time.perf_counter() - t0
            ready.clear()
            with ddp.no_sync():
                loss = loss_fn(ddp(x), y)
                begin = time.perf_counter()
                loss.backward()
            previous = begin
            for name, at in sorted(ready.items(), key=lambda kv: kv[1]):
                bwd[name] += at - previous
                previous = at
            for name, _ in reversed(leaves):  # backward order, like the real sends
                if params[name]:
                    flat = torch.cat([p.grad.reshape(-1) for p in params[name]])
                    t0 = time.perf_counter()
                    dist.all_reduce(flat)
                    comm[name] += time.perf_counter() - t0
            model.zero_grad(set_to_none=True)
    finally:
        for h in handles:
            h.remove()
    rows = [{"id": 0, "name": "data", "forward_us": t_io / iters * 1e6, "backward_us": 0.0,
             "comm_us": 0.0, "size_bytes": 0}]
    for k, (name, _) in enumerate(leaves, 1):
        size = sum(p.numel() * p.element_size() for p in params[name])
        rows.append({"id": k, "name": name, "forward_us": fwd[name] / iters * 1e6,
                     "backward_us": bwd[name] / iters * 1e6,
                     "comm_us": comm[name] / iters * 1e6 if size else 0.0, "size_bytes": size})
    return rows


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["id", "name", "forward_us", "backward_us",
                                                "comm_us", "size_bytes"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v)
                             for k, v in row.items()})
