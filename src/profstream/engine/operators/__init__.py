"""Streaming operators: thin stateful wrappers over the numba kernels in ``engine/kernels``."""
