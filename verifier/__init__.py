"""The verifier: judges handed-off artifacts (``verify`` queue, ``python -m verifier``)."""
