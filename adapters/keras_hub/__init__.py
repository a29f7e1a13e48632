"""keras-hub on Keras 3 with the JAX backend as a candidate (adapters/keras_hub/adapter.py)."""
