"""The parsers of ``strandline``'s commands: every one shows each option's default in its help."""

from __future__ import annotations

import argparse
from typing import Any, TypeAlias


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default after its help, where it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "(default" in text or action.default is None or action.default is False \
                or action.default == argparse.SUPPRESS:
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text + " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: help with defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


#: what a command module adds its subcommands to (``add_parser``)
#: (a string: argparse's class takes no type arguments when the program runs)
Subcommands: TypeAlias = "argparse._SubParsersAction[Parser]"
