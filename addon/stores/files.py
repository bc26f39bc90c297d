"""Where a store lives: a ``bridge_store`` value read as the stores read it
(``store_location``), and an SQLite store's file kept its owner's only (``private_file``).

Contract: stdlib and the config layer's parser only; shared by the reasoning store
(``addon.stores.reasoning``) and the usage ledger (``addon.stores.ledger``)."""

from __future__ import annotations

import os
import stat

from addon.config.options import ConfigError, StoreLocation, parse_store_url
from addon.stores.base import StoreError


def store_location(value: str) -> StoreLocation:
    """``parse_store_url`` (the config layer's), its ``ConfigError`` as a ``StoreError``."""
    try:
        return parse_store_url(value)
    except ConfigError as e:
        raise StoreError(str(e)) from None


CANNOT_PRIVATE = "others may read it and it cannot be made 0600"
"""How ``private_file``'s line ends when it could not change a file (a warning)."""
PRIVATE_MODE = 0o600
"""An SQLite store's file and its ``-wal`` / ``-shm``: its owner's only (the store's secret,
the stored reasoning and the usage ledger are in them)."""


def private_file(path: str) -> str | None:
    """Make the SQLite file ``path`` its owner's only, before SQLite opens it: created 0600 if
    missing (SQLite then gives its ``-wal`` and ``-shm`` the file's mode), and an existing one
    (or its ``-wal`` / ``-shm``) that others may read changed to 0600. Returns the line to say
    when it changed one (None: nothing to say). A file it cannot create (no such directory) is
    left to SQLite, which says why; one it may not change is said, not raised."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_MODE))
    except FileExistsError:
        pass
    except OSError:
        return None
    changed, failed = [], []
    for name in (path, f"{path}-wal", f"{path}-shm"):
        try:
            mode = os.stat(name).st_mode
            if stat.S_ISREG(mode) and mode & 0o077:
                os.chmod(name, PRIVATE_MODE)
                changed.append(f"{name} ({stat.S_IMODE(mode):04o})")
        except FileNotFoundError:
            continue
        except OSError as e:
            failed.append(f"{name} ({e.strerror or type(e).__name__})")
    if failed:
        return f"{', '.join(failed)}: {CANNOT_PRIVATE}"
    if changed:
        return f"{', '.join(changed)} could be read by others: made 0600"
    return None
