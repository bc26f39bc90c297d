# Shared by scripts/run, scripts/test and scripts/bench: find a Python >= 3.12,
# create or update .venv, install the project (editable) with the given extras.
# Usage (sourced): ensure_venv [extra]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

find_python() {
    local candidates=()
    [[ -n "${PYTHON:-}" ]] && candidates+=("$PYTHON")
    candidates+=(python3.13 python3.12 python3)
    # pyenv keeps versions that are installed but not activated out of PATH's shims.
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    for d in "$root"/versions/3.1[2-9]*/bin "$root"/versions/3.[2-9]*/bin; do
        [[ -d "$d" ]] && candidates+=("$d/python3")
    done
    candidates+=(/usr/local/bin/python3.13 /usr/local/bin/python3.12 /usr/bin/python3.13 /usr/bin/python3.12)
    local c
    for c in "${candidates[@]}"; do
        if "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
            command -v "$c" 2>/dev/null || echo "$c"
            return 0
        fi
    done
    return 1
}

# pip's own output goes to .venv/pip.log; it is shown only when pip fails.
pip_quiet() {
    if ! "$VENV/bin/python" -m pip install --quiet "$@" >"$VENV/pip.log" 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" "$VENV/pip.log" | tail -40 >&2
        echo "pip install $* failed (full log: $VENV/pip.log)" >&2
        exit 1
    fi
}

ensure_venv() {
    local extra="${1:-}"
    local spec="$ROOT"
    [[ -n "$extra" ]] && spec="$ROOT[$extra]"
    if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
        local py
        if ! py="$(find_python)"; then
            echo "cursor-bridge needs Python >= 3.12 (mitmproxy 12 does not run on older versions)." >&2
            echo "Install one, e.g. 'pyenv install 3.12' or 'apt-get install python3.12 python3.12-venv'," >&2
            echo "or point PYTHON=/path/to/python3.12 at it, then run this script again." >&2
            exit 1
        fi
        echo "==> creating .venv with $py ($("$py" --version 2>&1))" >&2
        rm -rf "$VENV"
        "$py" -m venv "$VENV"
        pip_quiet --upgrade pip
    fi
    # Reinstall only when pyproject.toml changed since the last install.
    local stamp="$VENV/.installed-${extra:-base}"
    if [[ ! -f "$stamp" || "$ROOT/pyproject.toml" -nt "$stamp" ]]; then
        echo "==> installing cursor-bridge${extra:+ [$extra]} into .venv" >&2
        pip_quiet --editable "$spec"
        touch "$stamp"
    fi
}
