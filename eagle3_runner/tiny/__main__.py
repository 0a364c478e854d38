"""``python -m eagle3_runner.tiny DEST --arch NAME``."""

from . import main

raise SystemExit(main())
