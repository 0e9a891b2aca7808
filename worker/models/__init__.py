"""The model stack: the seam every provider implements, the registry, prices, the limiter,
Gemini and the offline ``sim``."""
