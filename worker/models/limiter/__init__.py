"""The fleet-wide model limiter: in-process for embedded runs, in Redis for a fleet."""
