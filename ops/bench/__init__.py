"""Benchmarks of the runtime against real services (``python -m ops.bench.<name>``)."""
