"""``scripts/bench``: the benchmarks (``benchlib``, one module per part of the run)."""

from benchlib.main import main

if __name__ == "__main__":
    main()
