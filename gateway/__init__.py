"""Fan-out gateway for AI-agent event streams."""

__version__ = "0.1.0"
