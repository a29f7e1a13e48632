"""The conformance gate of tiny-kernels: ``nox -s conformance``.

Installs transformer-conformance at a pinned version, then this package, then runs the suite's checks
on this package's adapter and writes the report to conformance-report/. Arguments after ``--`` go to
the suite (they are pytest options; a --report-dir there wins over the one here):

    nox -s conformance -- --behaviour rms_norm --dtype float32
    nox -s conformance -- --hypothesis-profile=dev --hypothesis-seed=1

CONFORMANCE_SUITE says where the suite comes from instead of SUITE below: a checkout of it
(``CONFORMANCE_SUITE=../transformer-conformance``) or any other pip requirement.
"""

from __future__ import annotations

import os

import nox

#: The suite, pinned: a tag or commit of its repository, so the gate changes only when you move the pin.
SUITE = "transformer-conformance @ git+https://github.com/OWNER/transformer-conformance@v0.1.0"


@nox.session
def conformance(session: nox.Session) -> None:
    session.install(os.environ.get("CONFORMANCE_SUITE", SUITE))
    session.install(".")  # this package: its entry point names the adapter "tiny-kernels"
    session.run(
        "transformer-conformance",  # the same as: python -m transformer_conformance.conformance
        "--adapter=tiny-kernels",
        "--report-dir=conformance-report",
        # Known, accepted differences will go in conformance-expectations.toml (being designed):
        #   [[expect]]
        #   check = "rope/forward"
        #   dtype = "float16"
        #   adapter = "tiny-kernels"
        #   status = "fail"  # or "skip"
        #   reason = "why it is accepted"
        # read with "--expectations=conformance-expectations.toml".
        *session.posargs,
    )
