"""The pydantic models derived from the sweep settings' declarations (spec.settings): the
strict value types of study files, the study's setting fields, and ``SweepSpec``.

Apart from spec.settings so that ``orch --help`` and the command line's options are built
without importing pydantic.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)

from . import settings
from .settings import KINDS, Setting

# Strict, so YAML's `true` is no count and `2.5` no node count.
Count = Annotated[StrictInt, Field(ge=1)]
Name = Annotated[StrictStr, Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
OptionValue = StrictStr | StrictInt | StrictBool
OptionLists = dict[Name, Annotated[list[OptionValue], Field(min_length=1)]]

# A study file's type of each value kind of spec.settings.KINDS.
STRICT: dict[str, Any] = {
    "count": Count,
    "non_negative": Annotated[StrictInt, Field(ge=0)],
    "name": Name,
    "path": StrictStr,
    "flag": StrictBool,
    "share": Annotated[float, Field(gt=0, le=1)],
    "text": StrictStr,
}
assert set(STRICT) == set(KINDS)


def study_fields() -> dict[str, tuple[Any, Any]]:
    """Each setting a study may give, as a pydantic field definition: (annotation, field)."""
    out: dict[str, tuple[Any, Any]] = {}
    for s in settings.SETTINGS:
        if not s.study:
            continue
        item = STRICT[s.type]
        if s.dimension:
            default = None if s.default in (None, (None,)) else list(s.default)
            kind: Any = list[item] if default is not None else list[item] | None
            field = Field(default, min_length=1, description=s.description)
        else:
            kind = item | None if s.default is None else item
            field = Field(s.default, description=s.description)
        out[s.name] = (kind, field)
    return out


def _spec_field(s: Setting) -> tuple[Any, Any]:
    """A setting as a SweepSpec field: a dimension is a tuple (partitions may hold None: the
    site's default; tasks_per_node may be None: the partition's default)."""
    kind: Any = KINDS[s.type]
    if s.dimension:
        item = kind | None if s.default == (None,) else kind
        kind = tuple[item, ...] | None if s.default is None else tuple[item, ...]
    elif s.default is None:
        kind = kind | None
    return kind, s.default


class _SpecBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("tasks_per_node", mode="before", check_fields=False)
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        """One integer (the old form, e.g. netbench's) is a list of one."""
        return (v,) if isinstance(v, int) and not isinstance(v, bool) else v


# What the user asked for (command line or study): one field per setting, lists are the matrix's
# dimensions; ``options`` maps a mode option to its values (each a dimension too).
SweepSpec = create_model(
    "SweepSpec", __base__=_SpecBase, __module__=__name__,
    __doc__="What the user asked for on the command line; lists are matrix dimensions.",
    **{s.name: _spec_field(s) for s in settings.SETTINGS},
    options=(dict[str, tuple[str, ...]], Field(default_factory=dict)),
)
