"""PyTorch's rank side (torch-ddp, torch-fsdp, mpi-ssgd, horovod): the model zoo (models), the
epoch loop (epochs), the shared rank helpers and run dimensions (common), the on-disk input
pipeline (datasets) and the layer-wise trace (trace)."""
