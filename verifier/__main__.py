"""Entry point for ``python -m verifier``."""

from verifier.cli import cli

if __name__ == "__main__":
    cli(prog_name="python -m verifier")
