"""horovod, natively: Horovod's PyTorch example as its documentation writes it (hvd.init,
broadcast_parameters / broadcast_optimizer_state from rank 0, hvd.DistributedOptimizer, then
zero_grad, forward, ``loss.backward()``, ``optimizer.step()``), no timers in the loop. The
learning rate is orch's (0.01, not scaled by size): the step's cost does not depend on it."""

import horovod.torch as hvd
import torch

from benchmarks.native._common import parse_args
from benchmarks.native._torch import plain_step, run
from orchestrator.rankside.torch import models as models_torch


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
    # DistributedOptimizer.step() waits for the all-reduces and applies the averages.
    run("horovod", args, hvd.rank(), plain_step(model, optimizer, loss_fn))
    hvd.join()
    hvd.shutdown()


if __name__ == "__main__":
    main()
