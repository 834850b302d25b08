"""The user's own trainer: an unmodified torchrun-style training script, started on every rank
with PyTorch's env:// variables, its throughput (and loss, tokens/s, MFU where it prints them)
read from its output by the patterns of a trainer file (orchestrator/plan/trainer.py).
orch launches,
sweeps, gathers and merges it like any run; it does not time the script's phases."""

from ..base import Mode

MODE = Mode(
    name="trainer",
    framework="torch",  # the site's torch environment runs the script (its packages there)
    library="torch",  # the script's own: its model is a trainer file, not the zoo
    description="your own torchrun-style training script, run as it is; throughput, loss, "
    "tokens/s and MFU read from its output (phases not measured)",
    launchers=("srun", "local", "mpirun", "torchrun"),
    python_modules=("torch",),
    phases=False,
    # Its figures are the script's, from its own gradient exchange: orch's model of the
    # communication does not know its size, so nothing is predicted.
    synchronous=False,
)
