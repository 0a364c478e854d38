"""The public path of the patch declarations: user catalogs (those ``vllm-compat record``
writes among them) import ``from vllm_compat.patch import ...``.  They live in
:mod:`vllm_compat.catalog.patch`."""

from .catalog.patch import *  # noqa: F401,F403
from .catalog.patch import __all__  # noqa: F401
