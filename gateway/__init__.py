"""Fan-out gateway for AI-agent event streams."""

from gateway import native as _native

__version__ = "0.1.0"

# Before any module of the kernel is imported: its compiled build, where installed
# and current (gateway/native.py).
_native.install()
