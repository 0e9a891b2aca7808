"""Persistence: tables, the engine, claims and commits, every state transition, control."""
