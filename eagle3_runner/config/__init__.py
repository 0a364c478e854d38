"""``eagle3 run``'s config: one typed schema for every section and key (:mod:`.keys`,
:mod:`.schema`), checked before any step runs (:mod:`.load`); the stage commands' flags are
built from the same keys (:mod:`.flags`)."""

from .load import PipelineConfig, check_config, example_config, load_config

__all__ = ["PipelineConfig", "check_config", "example_config", "load_config"]
