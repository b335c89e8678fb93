"""Python worker and producer client for the orchestrator PostgreSQL extension."""

from .core import *  # noqa: F401,F403
from .core import __all__  # noqa: F401

__version__ = "0.1.0"
