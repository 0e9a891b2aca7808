"""A run's or a ladder's figures, as text, JSON and one self-contained HTML page."""
