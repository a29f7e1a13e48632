"""Flax: linen's and NNX's norm modules."""
