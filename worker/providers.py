"""Which model serves a session: ``sim`` offline, real providers by name."""

from __future__ import annotations

from worker.errors import ConfigError
from worker.model import Model
from worker.runs import RunConfig
from worker.settings import Settings
from worker.sim import Persona, SimModel, flaw_for
from worker.store import SessionView

#: Model name of the offline stand-in.
SIM = "sim"


def model_for(view: SessionView, settings: Settings) -> Model:
    """Build the model that plays ``view``'s session.

    Raises:
        ConfigError: the run names a model no provider serves.
    """
    config = RunConfig.model_validate(view.run_config)
    if view.model == SIM:
        return SimModel(
            seed=config.seed, index=view.index, persona=Persona(view.persona),
            latency_ms=config.sim_latency_ms, design_seed=view.brief["design_seed"],
            title=view.brief["title"], flaw=flaw_for(config.sim_flaw_rate, config.seed, view.index),
        )
    raise ConfigError(f"no provider serves model {view.model!r}")


def check_model(model: str) -> None:
    """Refuse, at enqueue time, a model no provider serves."""
    if model != SIM:
        raise ConfigError(f"no provider serves model {model!r}; use {SIM!r}")
