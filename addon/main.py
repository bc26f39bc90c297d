"""Entry point for ``mitmdump -s addon/main.py`` (and mitmweb / mitmproxy).

mitmproxy loads this file as ``__mitmproxy_script__.main`` with ``addon/`` on
``sys.path``, so relative imports cannot work here. The package is imported as
``addon`` — installed in editable mode by ``scripts/run`` — and, for a checkout
used without that install, from the repository root added below.
"""

import sys
from pathlib import Path

try:
    import addon.proxy
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import addon.proxy

addons = [addon.proxy.Bridge()]
