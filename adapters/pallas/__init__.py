"""JAX Pallas kernels run by the Pallas interpreter (adapter ``pallas``)."""
