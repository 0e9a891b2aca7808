"""Run use-cases: creating runs and ladders, forking, replaying, and recording verdicts."""
