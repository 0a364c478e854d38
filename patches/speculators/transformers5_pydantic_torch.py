"""``import speculators`` fails under transformers 5.x: pydantic cannot resolve ``torch``.

transformers 5.0 turned ``PretrainedConfig`` into an annotated class whose field
``dtype: str | torch.dtype | None`` (``transformers/configuration_utils.py``) names ``torch``,
which that module imports only under ``TYPE_CHECKING``.  ``SpeculatorModelConfig`` inherits
from both pydantic's ``BaseModel`` and ``PretrainedConfig``; at import time
``speculators/__init__.py`` calls ``reload_and_populate_configs()``, which ends in
``ReloadableBaseModel.reload_schema()`` -> ``cls.model_rebuild(force=True)``.  Pydantic then
evaluates the inherited annotation and fails with
``PydanticUndefinedAnnotation: name 'torch' is not defined`` (for the base config and, through
the tagged union of the registry, for every registered subclass).

Fix: give the rebuild the missing name (``_types_namespace={"torch": torch}``).  Harmless
under transformers 4.x (the annotation there does not name torch), so no version range.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

PYDANTIC_UTILS = "speculators/utils/pydantic_utils.py"

register(Patch(
    id="speculators.transformers5_pydantic_torch",
    title="resolve 'torch' when pydantic rebuilds speculators' config schemas",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    why="Under transformers 5.x `import speculators` raises PydanticUndefinedAnnotation "
        "(name 'torch' is not defined) while SpeculatorModelConfig rebuilds its schema.",
    upstream="transformers 5.0: configuration_utils.py PretrainedConfig annotates "
             "`dtype: str | torch.dtype | None` with torch imported only under TYPE_CHECKING; "
             "speculators/utils/pydantic_utils.py ReloadableBaseModel.reload_schema rebuilds it.",
    remove_when="speculators passes a types namespace (or stops rebuilding PretrainedConfig "
                "subclasses with pydantic); not fixed in 0.4.0.",
    edits=(
        ReplaceStmt(
            PYDANTIC_UTILS, "ReloadableBaseModel.reload_schema",
            old="cls.model_rebuild(force=True)",
            new='import torch\n\ncls.model_rebuild(force=True, _types_namespace={"torch": torch})',
        ),
    ),
), __name__)
