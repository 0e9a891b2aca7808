"""Gemini through ``google-genai``: the provider and the run's explicit context cache."""
