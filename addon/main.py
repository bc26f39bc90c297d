"""Entry point for ``mitmdump -s addon/main.py`` (and mitmweb / mitmproxy): the addon list.

mitmproxy loads this file as ``__mitmproxy_script__.main`` with ``addon/`` on
``sys.path``, so relative imports cannot work here. The package is imported as
``addon`` — installed in editable mode by ``scripts/run`` — and, for a checkout
used without that install, from the repository root added below.
"""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("addon.shell") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from addon.shell.addons import make_addons

addons = make_addons().all
