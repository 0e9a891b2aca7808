"""Alembic migrations; ``python -m scheduler migrate`` runs them."""
