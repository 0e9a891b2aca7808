"""The scheduler: ``python -m scheduler`` enqueues runs, follows them and reports."""
