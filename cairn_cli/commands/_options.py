"""Options a command hands to core as one object: each is declared once, in the command's signature, and gathered
from it by name (a command with many options does not list them a second time)."""

from __future__ import annotations

from dataclasses import fields
from enum import Enum


def option_values(shape: type, given: dict, **overrides) -> dict:
    """The fields of the dataclass `shape` a command was given (its `locals()`), an Enum member as its value;
    `overrides` (options renamed or parsed on the way) win."""
    values = {f.name: given[f.name] for f in fields(shape) if f.name in given}
    return {**{k: v.value if isinstance(v, Enum) else v for k, v in values.items()}, **overrides}
