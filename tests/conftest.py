"""Test-wide settings.

Hypothesis explores new examples on every local run (and remembers failures in
.hypothesis/); under CI (``CI`` set) it is derandomized, so a green main stays
green and a failure is reproducible from the log.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
