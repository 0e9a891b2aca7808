"""Operations: metrics, fakes, benchmarks and service helpers around the Swarm runtime."""
