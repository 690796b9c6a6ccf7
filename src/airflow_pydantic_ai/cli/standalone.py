"""The ``airflow-pydantic-ai`` console script: ``airflow pydantic-ai`` on releases that lack it.

Airflow 3.2 and later add the provider's commands to ``airflow`` (``airflow pydantic-ai cache ...``)
from the provider metadata's ``cli`` entry; Airflow 3.1 does not read that entry. There
``airflow-pydantic-ai cache ...`` runs the same commands with the same options, in the same Airflow
environment (``AIRFLOW_HOME``, configuration, metadata database).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``airflow-pydantic-ai``, from the definitions ``airflow`` itself uses."""
    from airflow.cli.cli_config import GroupCommand

    from airflow_pydantic_ai.cli.definition import get_cli_commands

    [group] = get_cli_commands()
    assert isinstance(group, GroupCommand)
    parser = argparse.ArgumentParser(prog="airflow-pydantic-ai", description=group.help)
    _add_subcommands(parser, group.subcommands)
    return parser


def _add_subcommands(parser: argparse.ArgumentParser, commands: Iterable[Any]) -> None:
    subparsers = parser.add_subparsers(metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.description or command.help)
        if hasattr(command, "subcommands"):
            _add_subcommands(sub, command.subcommands)
        else:
            for arg in command.args:
                arg.add_to_parser(sub)
            sub.set_defaults(func=command.func)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse ``argv`` and run the command (exit code 0, or 1 with a one-line error)."""
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
