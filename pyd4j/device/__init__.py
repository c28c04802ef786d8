"""Plans executed on device memory: the reference executor, the Backend contract and its host, CuPy and
native side-agent backends (the side-agent's Python binding)."""
