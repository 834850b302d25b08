"""horovod, natively: Horovod's PyTorch example as its documentation writes it (hvd.init,
broadcast_parameters / broadcast_optimizer_state from rank 0, hvd.DistributedOptimizer, then
zero_grad, forward, ``loss.backward()``, ``optimizer.step()``), no timers in the loop. The
learning rate is orch's (0.01, not scaled by size): the step's cost does not depend on it."""

import horovod.torch as hvd
import torch

from benchmarks.native._common import Clock, parse_args, report
from benchmarks.native._torch import synthetic_batches
from orchestrator.rankside import models_torch


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(0)
    model = models_torch.build(args.model, args.dataset)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         op=hvd.Average)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = synthetic_batches(args, hvd.rank())
    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        clock.step(k)
        x, y = next(batches)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    report("horovod", hvd.rank(), args.iters * args.batch_size, clock.done())
    hvd.join()
    hvd.shutdown()


if __name__ == "__main__":
    main()
