"""Real test infrastructure: dockerd, registry, base images."""
