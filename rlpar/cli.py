"""Command-line flags generated from frozen config dataclasses: a new field is a new flag, with no second list."""

from __future__ import annotations

import argparse
import dataclasses
import typing


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def parse_int_tuple(text: str) -> tuple[int, ...]:
    """``"64,64"`` -> ``(64, 64)``; an empty part (``"64,,64"``, ``"64,"``), a non-integer or a non-positive one is
    an ``argparse.ArgumentTypeError`` naming the value (argparse prints it in one line and exits with code 2)."""
    parts = [part.strip() for part in text.split(",")]
    try:
        values = tuple(int(part) for part in parts)
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers, e.g. 64,64")
    return values


def add_dataclass_flags(parser: argparse.ArgumentParser, cls: type, title: str, base=None) -> None:
    """One flag per field of ``cls``; the field's ``metadata["help"]`` becomes its help text, and the default shown
    is ``base``'s value (an instance, e.g. an env's preset) or the field's own."""
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        default = getattr(base, f.name) if base is not None else f.default
        help_text = f"{f.metadata.get('help', '')} (default: {default!r})".replace("%", "%%")
        dest = f"{cls.__name__}.{f.name}"
        if kind is bool:
            group.add_argument(flag_name(f.name), dest=dest, action=argparse.BooleanOptionalAction,
                               default=None, help=help_text)
        elif typing.get_origin(kind) is tuple:
            group.add_argument(flag_name(f.name), dest=dest, type=parse_int_tuple, default=None,
                               metavar="N,N", help=help_text)
        else:
            group.add_argument(flag_name(f.name), dest=dest, type=kind, default=None,
                               metavar=kind.__name__.upper(), help=help_text)


def build_dataclass(cls: type, namespace: argparse.Namespace, base=None, **overrides):
    """An instance of ``cls`` from the flags given; fields not given come from ``base`` (an instance, e.g. a
    per-environment preset) or, without one, keep their defaults."""
    values = {} if base is None else {f.name: getattr(base, f.name) for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(cls):
        value = getattr(namespace, f"{cls.__name__}.{f.name}", None)
        if value is not None:
            values[f.name] = value
    values.update(overrides)
    return cls(**values)
