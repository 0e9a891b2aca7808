"""The dashboard task: a standalone HTML/Canvas telemetry card, judged in Chromium."""
