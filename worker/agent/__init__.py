"""The agent engine: the turn loop, its tools and workspace, prompt, limits and timings."""
