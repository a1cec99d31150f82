"""Command-line flags generated from frozen config dataclasses: a new field is a new flag, with no second list.

No flag drops a value the user gave. A flag given twice must say the same both times (``--lr 1e-3 --lr 0.001`` is
fine, ``--lr 1e-3 --lr 3e-3`` is refused), and so must two flags that set the same thing (``--tensorboard`` and
``--no-tensorboard``), except the fields a dataclass marks ``repeatable`` (``--search``, ``--sweep``), whose values
add up. ``Parser`` makes every flag added to it behave so, and says what went wrong in one line: a value left over
(``--search A B``), an unknown flag, a value it cannot take.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
import typing

from rlpar.tools import errors

_GIVEN = "_flags_given"  # on the namespace while parsing: dest -> (option string, value, action) that set it
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


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


def parse_bool(text: str) -> bool:
    """``"true"``/``"false"`` (or 1/0, yes/no, on/off, any case) -> ``True``/``False``, for ``--FLAG VALUE``."""
    lowered = text.strip().lower()
    if lowered in TRUE or lowered in FALSE:
        return lowered in TRUE
    raise argparse.ArgumentTypeError(f"{text!r}: expected true or false (or give the flag alone, or its --no- form)")


def _shown(option_string: str, value, action: argparse.Action) -> str:
    """How the flag looked on the command line: ``--lr 0.003``, ``--hidden-sizes 64,64``, ``--no-tensorboard``."""
    if action.nargs == 0 or (action.nargs == "?" and value == action.const):  # given alone
        return option_string
    if isinstance(value, tuple):
        value = ",".join(str(v) for v in value)
    return f"{option_string} {value}"


def set_once(action: argparse.Action, namespace: argparse.Namespace, value, option_string: str) -> None:
    """Store ``value`` at ``action.dest``; ``argparse.ArgumentError`` if a flag already set it to another value."""
    given = namespace.__dict__.setdefault(_GIVEN, {})
    before = given.get(action.dest)
    if before is not None and before[1] != value:
        first, second = _shown(*before), _shown(option_string, value, action)
        if before[0] == option_string:
            message = f"{first} and {second}: {option_string} is given twice with different values; give it once"
        else:
            message = f"{first} and {second} are both given and disagree; give one of them"
        raise argparse.ArgumentError(None, message)
    given[action.dest] = (option_string, value, action)
    setattr(namespace, action.dest, value)


class Once(argparse.Action):
    """A flag that takes one value (or, with ``nargs="?"``, its ``const`` when given alone); given twice, the
    values must be equal. Also what a positional argument gets (argparse matches those once)."""

    def __init__(self, option_strings, dest, nargs=None, **kwargs):
        if option_strings and nargs not in (None, "?"):  # a positional is matched once, whatever its nargs
            raise ValueError(f"{option_strings}: a flag set once takes one value (nargs None or '?'), not {nargs!r}")
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        set_once(self, namespace, values, option_string)


class OnceConst(argparse.Action):
    """A flag without a value that stores ``const`` (``--no-tensorboard``, ``--no-compile-cache``); it must agree
    with any other flag that sets the same thing."""

    def __init__(self, option_strings, dest, const=None, default=None, required=False, help=None,  # noqa: A002
                 metavar=None):
        super().__init__(option_strings, dest, nargs=0, const=const, default=default, required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        set_once(self, namespace, self.const, option_string)


class Fields(argparse.Action):
    """A flag that may be repeated: each value adds fields, joined by a space (the separator of the fields within
    one value), so ``--search A --search B`` is ``--search 'A B'``. A field given twice is for the value's own
    parser to refuse."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, f"{before} {values}" if before else values)


class Parser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose flags are set once (``Once``, ``OnceConst``: also what plain
    ``add_argument`` calls get), spelt in full, and whose errors are one line on stderr (exit code 2): a value left
    over says which flag it follows and how to give both, an unknown flag names the closest known ones."""

    def __init__(self, *args, **kwargs):
        # No abbreviations: rlpar.train reads the device and env flags before this parser exists, by their full
        # names, so --dev 2 would be --devices 2 here and nothing there; a misspelt flag gets the closest names.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", None, Once)
        self.register("action", "store", Once)
        self.register("action", "store_const", OnceConst)

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"error: {errors.one_line(message, 2000)} ({self.prog} --help lists the flags)\n")

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(_GIVEN, None)
        return parsed, extras

    def parse_args(self, args=None, namespace=None):
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            self.error(self.left_over(argv, extras))
        return parsed

    def left_over(self, argv: list[str], extras: list[str]) -> str:
        """What to say of ``extras``, the arguments of ``argv`` no flag took (the first one)."""
        extra = extras[0]
        if extra.startswith("-") and extra not in ("-", "--"):
            name = extra.split("=", 1)[0]
            known = [o for o in self._option_string_actions if o.startswith("--")]
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            return f"unknown flag {name}{hint}"
        at = max((i for i, arg in enumerate(argv) if arg == extra), default=len(argv))  # not an equal value before
        before = next((i for i in range(at - 1, -1, -1) if argv[i].startswith("-")), None)
        action = self._option_string_actions.get(argv[before].split("=", 1)[0]) if before is not None else None
        if action is None:
            takes = " ".join(a.metavar or a.dest for a in self._actions if not a.option_strings)
            what = f"{self.prog} takes {takes} and flags, " if takes else ""
            return f"unexpected argument {extra!r}: {what}every other value follows its flag (--FLAG VALUE)"
        option = argv[before].split("=", 1)[0]
        if action.nargs == 0:
            return f"unexpected {extra!r} after {option}, which takes no value"
        value = argv[before].split("=", 1)[1] if "=" in argv[before] else argv[before + 1]
        if isinstance(action, Fields):
            return (f"unexpected {extra!r} after {option} {value}: {option} takes one value; give several fields "
                    f"in one quoted string, {option} '{value} {extra}', or repeat the flag, {option} {value} "
                    f"{option} {extra}")
        return (f"unexpected {extra!r} after {option} {value}: {option} takes one value (quote a value that has "
                "spaces)")


def add_dataclass_flags(parser: argparse.ArgumentParser, cls: type, title: str, base=None) -> None:
    """One flag per field of ``cls``; the field's ``metadata["help"]`` becomes its help text, and the default shown
    is ``base``'s value (an instance, e.g. an env's preset) or the field's own. A bool field is ``--FLAG`` (or
    ``--FLAG true|false``) and ``--no-FLAG``; a field with ``metadata["repeatable"]`` (a string of fields separated by
    spaces) may be given several times, its values joined (``Fields``); every other flag is set once (``Once``)."""
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        default = getattr(base, f.name) if base is not None else f.default
        help_text = f"{f.metadata.get('help', '')} (default: {default!r})".replace("%", "%%")
        dest, flag = f"{cls.__name__}.{f.name}", flag_name(f.name)
        if kind is bool:  # --flag, --flag true|false, --no-flag
            group.add_argument(flag, dest=dest, action=Once, nargs="?", const=True, type=parse_bool, default=None,
                               metavar="true|false", help=help_text)
            group.add_argument("--no-" + flag[2:], dest=dest, action=OnceConst, const=False, default=None,
                               help=f"the same as {flag} false")
        elif f.metadata.get("repeatable"):
            group.add_argument(flag, dest=dest, action=Fields, type=kind, default=None,
                               metavar=kind.__name__.upper(), help=help_text)
        elif typing.get_origin(kind) is tuple:
            group.add_argument(flag, dest=dest, action=Once, type=parse_int_tuple, default=None,
                               metavar="N,N", help=help_text)
        else:
            group.add_argument(flag, dest=dest, action=Once, type=kind, default=None,
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
