"""Hypothesis settings shared by the property tests (``test_fuzz_*.py``): small in CI, long on demand.

The default profile, ``ci``, runs every property with the number of examples its test asks for
(a few hundred: all of them together take seconds), with no deadline (a loaded CI machine must
not fail a test), no example database on disk, and the same examples on every run
(``derandomize``), so that a failing run is a change's doing, not the draw's. New examples come
from ``HYPOTHESIS_PROFILE=fuzz``, which draws afresh, multiplies every count by ``FUZZ_SCALE``
(default 100) and keeps failing examples in ``.hypothesis/`` so that a rerun tries them first
(a failure it finds becomes a fixed test, as ``test_a_vector_of_without_its_vector_is_written_back_as_read``
did)::

    HYPOTHESIS_PROFILE=fuzz python3 -m pytest -q tests/test_fuzz_*.py
    HYPOTHESIS_PROFILE=fuzz FUZZ_SCALE=1000 python3 -m pytest -q tests/test_fuzz_parser.py

    >>> @examples(300)
    ... @given(st.binary())
    ... def test_decoding_raises_only_our_errors(data): ...
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, database=None, print_blob=True, derandomize=True)
settings.register_profile("fuzz", deadline=None, print_blob=True)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)
SCALE = int(os.environ.get("FUZZ_SCALE", "100")) if PROFILE == "fuzz" else 1


def examples(n: int) -> settings:
    """Settings for a property run on *n* examples in CI (*n* times ``FUZZ_SCALE`` under the fuzz profile)."""
    return settings(max_examples=n * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
