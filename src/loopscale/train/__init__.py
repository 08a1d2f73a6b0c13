"""Training (method §7): MuonH + AdamW, LR transfer and schedule, the training loop, checkpoints.

Public API::

    TrainConfig, DataConfig, OptimConfig, load_train_config(yaml_path, overrides)   # no torch import
    train(cfg, out_dir, resume=True) -> dict          # the result.json contents
    load_checkpoint_model(path) -> (LoopedGPT, TrainConfig)
    plan_run(cfg, dataset, world=1) -> Plan            # steps, tokens, micro-batch, validation size, loops

``train``, ``load_checkpoint_model`` and ``plan_run`` import torch on first use, so the planner and the CLI
can import the config types cheaply.
"""

from loopscale.train.config import DataConfig, OptimConfig, TrainConfig, load_train_config

_LOOP_NAMES = ("train", "load_checkpoint_model", "plan_run")


def __getattr__(name: str):
    if name in _LOOP_NAMES:
        from loopscale.train import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'loopscale.train' has no attribute {name!r}")


__all__ = [
    "DataConfig",
    "OptimConfig",
    "TrainConfig",
    "load_checkpoint_model",
    "load_train_config",
    "plan_run",
    "train",
]
