"""``python -m orchestrator`` is the ``orch`` command."""

from .cli import main

main()
