"""The conformance gate of tiny-kernels: ``nox -s conformance``.

Installs transformer-conformance as SUITE pins it, then this package, then runs the suite's checks
on this package's adapter, with this repository's known failures (conformance-expectations.toml), and
writes the report to conformance-report/. Arguments after ``--`` go to the suite (a --report-dir there wins
over the one here):

    nox -s conformance -- --behaviour rms_norm --dtype float32
    nox -s conformance -- --hypothesis-profile=dev --hypothesis-seed=1

CONFORMANCE_SUITE says where the suite comes from instead of SUITE below: a checkout or a wheel of it
(``CONFORMANCE_SUITE=/path/to/transformer-conformance``) or any other pip requirement.
"""

from __future__ import annotations

import os

import nox

#: The suite, pinned, so the gate changes only when you move the pin. Until its first release is on PyPI, from
#: its repository at a release tag (OWNER: the account that holds the suite's repository; README.md, "Where the
#: suite comes from"); once released, the release itself:
#:     SUITE = "transformer-conformance==0.1.0"
SUITE = "transformer-conformance @ git+https://github.com/OWNER/transformer-conformance@v0.1.0"


@nox.session
def conformance(session: nox.Session) -> None:
    session.install(os.environ.get("CONFORMANCE_SUITE", SUITE))
    session.install(".")  # this package: its entry point names the adapter "tiny-kernels"
    session.run(
        "transformer-conformance",  # the same as: python -m transformer_conformance.conformance
        "--adapter=tiny-kernels",
        "--report-dir=conformance-report",
        # known, accepted failures of this package: none today (the file says how to list one)
        "--expectations=conformance-expectations.toml",
        *session.posargs,
    )
