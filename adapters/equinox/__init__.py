"""Equinox's norm layers as a candidate (``equinox``)."""
