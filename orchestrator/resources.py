"""Where templates, the shipped site configs and the framework environments are, in a checkout
and in an installed wheel.

The wheel carries them under ``orchestrator/_data`` (see pyproject's force-include); a checkout
or an editable install finds them at the top of the repository. One function decides, so nothing
else guesses paths.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Directory ``name`` (templates, site-configs, frameworks, studies), installed copy first."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"orch is installed without its {name}/ directory ({_PACKAGE})")


def package_dir() -> Path:
    """The ``orchestrator`` package directory (its rank side is staged next to runs)."""
    return _PACKAGE
