"""The agent engine: the turn loop, its tools and workspace, prompt, profiles and limits."""
