"""The Keras backend the ``keras-hub`` adapter runs on: JAX, chosen before Keras is imported, or refused.

Keras 3 picks its backend once, when it is first imported, from ``KERAS_BACKEND`` (else ``~/.keras/keras.json``).
The adapter's declarations are measured on the JAX backend, so the verdict must not depend on the caller's
environment: ``select_jax`` sets ``KERAS_BACKEND=jax`` when Keras is not imported yet and nothing else is asked
for, and refuses with one line when Keras is already imported with another backend or ``KERAS_BACKEND`` names
another. It never runs the checks on another backend than the one the report names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping

from transformer_conformance.adapters.versions import UnsupportedVersion

BACKEND = "jax"


def imported_backend(modules: Mapping[str, object] | None = None) -> str | None:
    """The backend of an already imported Keras, or None when Keras is not imported."""
    keras = (sys.modules if modules is None else modules).get("keras")
    if keras is None:
        return None
    return str(keras.backend.backend())  # type: ignore[attr-defined]


def select_jax(environ: MutableMapping[str, str] | None = None, modules: Mapping[str, object] | None = None) -> None:
    """Make Keras run on JAX, or refuse (UnsupportedVersion, one line) when another backend is asked for or
    already loaded."""
    env = os.environ if environ is None else environ
    loaded = imported_backend(modules)
    if loaded is not None and loaded != BACKEND:
        raise UnsupportedVersion(
            f"the keras-hub adapter runs on Keras's {BACKEND} backend; got keras already imported with the "
            f"{loaded} backend (start a fresh process with KERAS_BACKEND={BACKEND})"
        )
    asked = env.get("KERAS_BACKEND")
    if asked is not None and asked != BACKEND:
        raise UnsupportedVersion(
            f"the keras-hub adapter runs on Keras's {BACKEND} backend; got KERAS_BACKEND={asked}, should be "
            f"{BACKEND} or unset"
        )
    if loaded is None:
        env["KERAS_BACKEND"] = BACKEND
