"""``python -m scheduler``."""

from scheduler.cli import main

main()
