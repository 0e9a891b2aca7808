"""The layout holds: no import cycle, layers import one way, the core loads no Celery."""

from __future__ import annotations

import subprocess
import sys

import grimp
import pytest

PACKAGES = ("worker", "scheduler", "verifier", "ops")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    """The import graph of the project's packages, type-checking imports left out."""
    return grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)


def test_no_module_imports_itself_through_others(graph: grimp.ImportGraph) -> None:
    cycles = sorted(
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if graph.chain_exists(importer=imported, imported=importer)
    )
    assert cycles == []


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("worker", "scheduler"),
        ("worker", "verifier"),
        ("worker", "ops"),
        ("worker.store", "worker.agent"),
        ("worker.store", "worker.fleet"),
        ("worker.store", "worker.models"),
        ("worker.store", "worker.tasks"),
        ("worker.store", "worker.reads"),
        ("worker.store", "worker.runs"),
        ("worker.models", "worker.agent"),
        ("worker.models", "worker.tasks"),
        ("worker.models", "worker.runs"),
        ("worker.tasks", "worker.agent"),
        ("worker.tasks", "worker.store"),
        ("worker.tasks", "worker.fleet"),
        ("worker.tasks", "worker.runs"),
        ("worker.tasks", "worker.reads"),
        ("worker.agent", "worker.runs"),
        ("worker.agent", "worker.reads"),
        ("worker.fleet", "worker.runs"),
        ("worker.reads", "worker.runs"),
        ("worker.agent", "worker.celery"),
        ("worker.fleet", "worker.celery"),
        ("worker.models", "worker.celery"),
        ("worker.store", "worker.celery"),
    ],
)
def test_layers_import_one_way(graph: grimp.ImportGraph, lower: str, upper: str) -> None:
    chains = graph.find_shortest_chains(importer=lower, imported=upper, as_packages=True)
    assert chains == set(), f"{lower} must not import {upper}"


@pytest.mark.parametrize(
    "module", ["worker", "worker.agent.tools", "worker.tasks.dashboard.checks"]
)
def test_the_core_loads_no_celery_sdk_or_redis(module: str) -> None:
    # Given a fresh interpreter, When the core module is imported
    code = (
        f"import sys, {module}\n"
        "heavy = ['celery', 'kombu', 'google.genai', 'redis']\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    # Then none of the heavy dependencies came with it
    assert loaded == ""
