"""Layer skipping for patching rows: `start_at` lives in interp.models.skip (streaming-head scans use it too)."""

from interp.models.skip import start_at

__all__ = ["start_at"]
