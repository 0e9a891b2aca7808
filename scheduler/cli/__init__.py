"""``python -m scheduler``: the command line."""

from scheduler.cli.commands import cli, main

__all__ = ["cli", "main"]
