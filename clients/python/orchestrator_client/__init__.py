"""Python worker and producer client for the orchestrator PostgreSQL extension."""

from .core import *  # noqa: F401,F403
from .core import __all__ as _core_all
from .aio import AsyncWorker

__all__ = [*_core_all, "AsyncWorker"]
__version__ = "0.2.0"
