"""Swarm's core: the agent's turn loop, the models, the store and the fleet's threads.

Importing it loads nothing: no Celery, no model SDK. ``celery -A worker`` finds the app in
:mod:`worker.celery`.
"""
