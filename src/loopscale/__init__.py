"""loopscale: how much is one recurrence worth? Iso-depth scaling laws for looped language models."""

__version__ = "0.1.0"
