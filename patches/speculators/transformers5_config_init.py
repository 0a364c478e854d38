"""speculators' config classes cannot be built or saved under transformers 5.x.

transformers 5 (``transformers/configuration_utils.py``) changed ``PreTrainedConfig`` in two
ways that break speculators' pydantic-and-transformers hybrid ``SpeculatorModelConfig``:

* ``PreTrainedConfig.__init_subclass__`` wraps the ``__init__`` of every subclass that does not
  define its own, so ``Eagle3SpeculatorConfig(...)`` skips ``SpeculatorModelConfig.__init__``
  (which initializes the pydantic side first) and fails with
  ``AttributeError: __pydantic_fields_set__``.  Fix: give ``Eagle3SpeculatorConfig`` its own
  ``__init__`` that defers to the parent, and build its pydantic schema once the package has
  the class (it cannot be built while the class is created: ``PretrainedConfig``'s
  annotations name ``torch``), before ``from_pretrained`` validates with it.
* ``save_pretrained`` calls ``self.validate()``; pydantic's deprecated ``BaseModel.validate(value)``
  classmethod comes first in the MRO and rejects the call.  Fix: a ``validate`` method on
  ``SpeculatorModelConfig`` that runs ``PretrainedConfig.validate``.

Both additions are inert under transformers 4.x (the same ``__init__`` chain; ``validate`` is
never called there), so the patch has no transformers range: a ``pip install --target`` site
may not hold transformers at all, and the fix must still be in place for training.
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, ReplaceDef, register

CONFIG = "speculators/config.py"
EAGLE3_CONFIG = "speculators/models/eagle3/config.py"
EAGLE3_INIT = "speculators/models/eagle3/__init__.py"

register(Patch(
    id="speculators.transformers5_config_init",
    title="build and save speculators' config classes under transformers 5",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    why="Under transformers 5.x Eagle3SpeculatorConfig(...) raises AttributeError "
        "__pydantic_fields_set__ and save_pretrained fails in pydantic's BaseModel.validate: "
        "training (eagle3 train, speculators' Trainer) cannot start or save a checkpoint.",
    upstream="transformers 5.0: configuration_utils.py PreTrainedConfig.__init_subclass__ wraps "
             "subclass __init__; PreTrainedConfig.save_pretrained calls self.validate().",
    remove_when="speculators defines __init__/validate on its config classes (not in 0.4.0).",
    edits=(
        ReplaceDef(CONFIG, "SpeculatorModelConfig.validate", create=True, new='''
def validate(self, *args, **kwargs):
    """transformers 5's save_pretrained calls self.validate(): run PretrainedConfig's."""
    return PretrainedConfig.validate(self)
'''),
        ReplaceDef(EAGLE3_CONFIG, "Eagle3SpeculatorConfig.__init__", create=True, new='''
def __init__(self, **kwargs):
    # Defined here so transformers 5's __init_subclass__ does not replace it: the parent
    # initializes the pydantic fields first.
    super().__init__(**kwargs)
'''),
        # The schema cannot be built while the class is created (PretrainedConfig's
        # annotations name torch, imported there only for type checking): build it as soon as
        # the package has the class, before anything validates with it (from_pretrained).
        InsertAfter(
            EAGLE3_INIT, "",
            after="from speculators.models.eagle3.config import Eagle3SpeculatorConfig",
            new='import torch as _torch\n\n'
                'Eagle3SpeculatorConfig.model_rebuild(force=True, _types_namespace={"torch": _torch})',
        ),
    ),
), __name__)
