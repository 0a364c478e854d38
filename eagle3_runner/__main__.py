"""``python -m eagle3_runner``: the ``eagle3`` command line."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
