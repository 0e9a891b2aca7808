"""``ops/prometheus.yml`` is a scrape configuration Prometheus can load."""

from __future__ import annotations

from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parents[2] / "ops" / "prometheus.yml"


def test_scrape_config_names_the_workers_and_flower() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"swarm-workers", "swarm-flower"}
    targets = [t for c in jobs["swarm-workers"]["static_configs"] for t in c["targets"]]
    assert targets and all(t.rsplit(":", 1)[1].isdigit() for t in targets)
    # Flower's /metrics is behind its basic auth (ops/flowerconfig.py)
    assert "basic_auth" in jobs["swarm-flower"]
