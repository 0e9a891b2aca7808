"""A fake Gemini API on 127.0.0.1, played by the sim personas (``python -m ops.fake_gemini``)."""

from ops.fake_gemini.faults import FAULT_HEADER, Fault, FaultRule
from ops.fake_gemini.server import FakeGemini, Served, SimConfig

__all__ = ["FAULT_HEADER", "FakeGemini", "Fault", "FaultRule", "Served", "SimConfig"]
