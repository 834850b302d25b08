"""Native scripts of benchmarks.fidelity: one per mode, ``<pkg>.py`` named after the mode's
folder under ``orchestrator/modes``; each is the framework's documented training loop, with no
orch instrumentation, run inside a twin of orch's rendered job (see benchmarks/fidelity.py)."""
