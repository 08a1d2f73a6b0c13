"""The looped transformer (method §2): ``LoopedGPT`` built from a ``loopscale.config.ModelConfig``."""

from loopscale.model.gpt import LoopedGPT

__all__ = ["LoopedGPT"]
