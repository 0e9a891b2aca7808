"""Persistence: tables, the engine, every state transition, and the read models."""
