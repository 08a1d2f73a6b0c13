"""Typed configuration of one training run: ``TrainConfig`` = model + data + optimiser + budget + runtime.

Every run is described by exactly one ``TrainConfig``, loaded from YAML and/or flags through
``loopscale.config.from_dict`` (unknown keys are refused) and written back, resolved, into the run folder.
Defaults are the paper's recipe (method §7); scaled-down recipes for small models are configuration only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from loopscale.config import ModelConfig, from_dict, load_yaml
from loopscale.errors import UserError

RECIPES = ("muonh", "adamw")
# OptimConfig's base learning rates (an LR calibration scales them all by one multiplier)
LR_KEYS = ("matrix_lr", "embed_lr", "unembed_lr", "norm_lr", "hc_lr", "injection_lr", "adamw_matrix_lr")
DEPTH_SAMPLERS = ("poisson-lognormal",)  # loopscale.train.plan: a loop count drawn per micro-batch
CURRICULA = ("linear",)  # loopscale.train.plan: the loop count ramps from 1 to r
# How D_ref counts the looped reference (method §7.3): "released" at the training run's r, as the authors'
# scripts/base_train.py does (what produced the published runs); "prose" at the reference's own r for
# every r > 1, as the paper's text reads.
D_REF_RULES = ("released", "prose")
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16")
TRACKERS = ("none", "wandb", "trackio")  # loopscale.train.tracking
TRACKER_MODES = ("offline", "online")
DEFAULT_DATASET = "data/packed/default-bpe4096-T256"  # what `loopscale data prepare` builds by default


@dataclass
class DataConfig:
    """Where the packed rows live and how much held-out text the final validation loss covers."""

    path: str = DEFAULT_DATASET  # a PackedDataset folder (meta.json + row shards)
    # Target tokens of the final validation loss, read from row 0 of the "val" split (the same tokens for
    # every run): ceil(val_tokens / T) rows. None = the whole val split.
    val_tokens: int | None = None

    def validate(self) -> None:
        if not self.path:
            raise UserError(
                "data.path is empty; point it at a dataset folder built by `loopscale data prepare`"
            )
        if self.val_tokens is not None and self.val_tokens < 1:
            raise UserError(
                f"data.val_tokens must be >= 1 (or null for the whole val split), got {self.val_tokens}"
            )


@dataclass
class OptimConfig:
    """Optimiser recipe, base learning rates and the LR transfer rules (method §7.1–7.4).

    ``muonh``: MuonH for every 2-D block matrix and W_inj, AdamW for wte, lm_head, norm gains, HC scalars and
    Parcae's injection (A_log, dt_bias and B, never decayed).
    ``adamw``: plain AdamW for every group; block matrices use ``adamw_matrix_lr`` (not in the paper).
    Learning rates: MuonH η = matrix_lr · (B/ref_batch_tokens)^batch_exponent · (D/D_ref)^(−data_exponent);
    wte and lm_head η = base · (d/ref_width)^(−width_exponent) · (B/ref_batch_tokens)^batch_exponent; norm
    gains, HC scalars and Parcae's injection get the width factor only (as the authors' released training
    script does for the first two).
    D_ref = d_ref_tokens_per_param × (N_once + r·N_rec) of a reference model at width ref_width with linear
    injection (ref_r_looped loops for looped runs, the plain model for r = 1); ``d_ref_rule`` picks the r.
    """

    recipe: str = "muonh"
    matrix_lr: float = 0.014  # MuonH base LR
    embed_lr: float = 0.3  # wte
    unembed_lr: float = 0.004  # lm_head
    norm_lr: float = 0.005  # every RMSNorm gain
    hc_lr: float = 0.01  # hyperconnection scalars
    injection_lr: float = 0.01  # Parcae's injection (A_log, dt_bias, B); not in the paper: hc_lr's default
    adamw_matrix_lr: float = 0.003  # block matrices under the plain "adamw" recipe (our choice)
    adam_betas: tuple[float, float] = (0.8, 0.95)
    adam_eps: float = 1e-10
    weight_decay: float = 0.0  # AdamW groups; MuonH never decays (a no-op on the sphere)
    muon_momentum: float = 0.95  # Nesterov momentum of MuonH
    polar_express_steps: int = 5  # Polar-Express orthogonalisation iterations (1..5)
    ref_width: int = 640  # d of the reference model (s = 10)
    ref_batch_tokens: int = 262_144  # 2^18
    ref_r_looped: int = 4  # loops of the looped reference, which fix its layout (paper: 2-4-2)
    # "released": count the looped reference at the run's own r (paper template: D_ref = 606,380,800 /
    # 1,016,083,200 / 1,835,488,000 tokens at r = 2 / 4 / 8); "prose": at ref_r_looped for every r > 1
    # (1,016,083,200). r = 1 runs use the plain reference either way (983,315,200).
    d_ref_rule: str = "released"
    width_exponent: float = 0.5
    batch_exponent: float = 0.558
    data_exponent: float = 0.32
    d_ref_tokens_per_param: float = 10.0  # D_ref = this × code-effective params of the reference model
    d_ref: float | None = None  # tokens; overrides the computed D_ref (scaled-down recipes)
    final_lr_fraction: float = 0.1  # linear decay from the peak to this fraction, no warmup

    def validate(self) -> None:
        if self.recipe not in RECIPES:
            raise UserError(f"optim.recipe must be one of {', '.join(RECIPES)}, got {self.recipe!r}")
        for name in LR_KEYS:
            if getattr(self, name) < 0:
                raise UserError(f"optim.{name} must be >= 0, got {getattr(self, name)}")
        if not all(0 <= b < 1 for b in self.adam_betas) or len(self.adam_betas) != 2:
            raise UserError(f"optim.adam_betas must be two numbers in [0, 1), got {list(self.adam_betas)}")
        if not 0 <= self.muon_momentum < 1:
            raise UserError(f"optim.muon_momentum must be in [0, 1), got {self.muon_momentum}")
        if not 1 <= self.polar_express_steps <= 5:
            raise UserError(f"optim.polar_express_steps must be in 1..5, got {self.polar_express_steps}")
        if self.adam_eps <= 0 or self.ref_width <= 0 or self.ref_batch_tokens <= 0 or self.ref_r_looped < 2:
            raise UserError(
                "optim: adam_eps, ref_width and ref_batch_tokens must be positive, ref_r_looped >= 2"
            )
        if self.d_ref_rule not in D_REF_RULES:
            raise UserError(
                f"optim.d_ref_rule must be one of {', '.join(D_REF_RULES)}, got {self.d_ref_rule!r}"
            )
        if self.d_ref is not None and self.d_ref <= 0:
            raise UserError(f"optim.d_ref must be a positive token count, got {self.d_ref:g}")
        if self.d_ref_tokens_per_param <= 0:
            raise UserError("optim.d_ref_tokens_per_param must be positive")
        if not 0 <= self.final_lr_fraction <= 1:
            raise UserError(f"optim.final_lr_fraction must be in [0, 1], got {self.final_lr_fraction}")


@dataclass
class TrainConfig:
    """One training run. Exactly one of ``budget`` (FLOPs C → steps = round(C / (F·B))) or ``steps``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    budget: float | None = None  # training FLOPs C
    steps: int | None = None  # optimiser steps (instead of a budget)
    batch_tokens: int = 262_144  # global batch B in tokens (a multiple of T × data-parallel ranks)
    micro_batch: int | None = None  # sequences per forward pass per rank; None = the rank's whole batch
    seed: int = 0  # model initialisation (the data order is fixed by the dataset)
    # Loop-count recipes (loopscale.train.plan), at most one: each changes only how many loops a micro-batch
    # runs (full BPTT through all of them), so a run and the same config without it are a matched pair.
    depth_sampling: str | None = None  # poisson-lognormal: T = Poisson(e^τ) + 1 per micro-batch, E[T] = r
    depth_sigma: float = 0.5  # σ of τ ~ N(ln(r − 1) − σ²/2, σ) (depth_sampling)
    loop_curriculum: str | None = None  # "linear:F": the loop count ramps 1 → r over the first ⌈F·S⌉ steps
    device: str = "auto"  # auto (cuda when available) | cpu | cuda
    precision: str = "auto"  # auto (fp32 on CPU, bf16 autocast on CUDA) | fp32 | bf16
    # torch.compile the model (once per run; r is fixed). auto: compile when the run is long enough to pay
    # for the compile (loopscale.train.perf.compile_pays); the run's config.yaml records what was decided.
    # The default stays false: it is part of the meaning of every spec already written (a published sweep's
    # `train: {}` resumed under auto would mix compiled and eager runs, and so would a price's pairs against
    # the published eager bases); new sweeps opt in with `train: {compile: auto}` (benchmarks/RESULTS.md).
    compile: bool | str = False
    checkpoint_every_steps: int | None = None  # also checkpoint every N steps
    checkpoint_every_s: float | None = 600.0  # checkpoint when this many seconds passed since the last
    log_every: int = 1  # metrics.jsonl line every N steps (the last step is always logged)
    peak_flops: float | None = None  # FLOP/s per device for MFU; None = measured matmul peak (cached)
    progress: bool = True  # tqdm progress bar on stderr (rank 0)
    # CPU threads of the run (torch.set_num_threads). None: the process default (OMP_NUM_THREADS, else all
    # cores) on a fresh start, the recorded count on --resume. The resolved count is written to the run's
    # config.yaml and reused on resume: the thread count changes the floating-point reduction order, so a
    # resume with another count is not bit-identical to an uninterrupted run.
    threads: int | None = None
    # Experiment tracking (loopscale.train.tracking): none | wandb | trackio, one tracker run per training
    # run, logging what metrics.jsonl logs plus the final result. wandb runs offline into the run folder
    # unless tracker_mode is "online" (None: WANDB_MODE, else offline). Group: a sweep sets its name;
    # name: default the run folder's name.
    tracker: str = "none"
    tracker_mode: str | None = None
    tracker_project: str = "loopscale"
    tracker_group: str | None = None
    tracker_name: str | None = None

    def validate(self) -> None:
        for part in (self.model, self.data, self.optim):
            part.validate()
        if (self.budget is None) == (self.steps is None):
            raise UserError("set exactly one of budget (training FLOPs) or steps")
        if self.steps is not None and self.steps < 1:
            raise UserError(f"steps must be >= 1, got {self.steps}")
        if self.batch_tokens < 1 or self.batch_tokens % self.model.seq_len:
            raise UserError(
                f"batch_tokens {self.batch_tokens} must be a positive multiple of the context length "
                f"T={self.model.seq_len}"
            )
        if self.micro_batch is not None and self.micro_batch < 1:
            raise UserError(f"micro_batch must be >= 1 sequences, got {self.micro_batch}")
        if self.device.split(":")[0] not in DEVICES:
            raise UserError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if self.compile not in (True, False, "auto"):
            raise UserError(f"compile must be true, false or auto, got {self.compile!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.checkpoint_every_steps is not None and self.checkpoint_every_steps < 1:
            raise UserError(f"checkpoint_every_steps must be >= 1, got {self.checkpoint_every_steps}")
        if self.checkpoint_every_s is not None and self.checkpoint_every_s <= 0:
            raise UserError(f"checkpoint_every_s must be positive, got {self.checkpoint_every_s}")
        if self.log_every < 1:
            raise UserError(f"log_every must be >= 1, got {self.log_every}")
        if self.threads is not None and self.threads < 1:
            raise UserError(f"threads must be >= 1, got {self.threads}")
        if self.peak_flops is not None and self.peak_flops <= 0:
            raise UserError(f"peak_flops must be positive FLOP/s, got {self.peak_flops:g}")
        if self.tracker not in TRACKERS:
            raise UserError(f"tracker must be one of {', '.join(TRACKERS)}, got {self.tracker!r}")
        if self.tracker_mode is not None and self.tracker_mode not in TRACKER_MODES:
            raise UserError(
                f"tracker_mode must be {' or '.join(TRACKER_MODES)} (or null), got {self.tracker_mode!r}"
            )
        self._validate_loop_recipe()

    def _validate_loop_recipe(self) -> None:
        if self.depth_sampling is not None and self.depth_sampling not in DEPTH_SAMPLERS:
            raise UserError(
                f"depth_sampling must be {' or '.join(DEPTH_SAMPLERS)} (or null), got {self.depth_sampling!r}"
            )
        if not self.depth_sigma > 0:
            raise UserError(f"depth_sigma must be > 0, got {self.depth_sigma}")
        if self.loop_curriculum is not None:
            curriculum_fraction(self.loop_curriculum)  # UserError when malformed
        recipe = self.loop_recipe
        if recipe is None:
            return
        if self.depth_sampling is not None and self.loop_curriculum is not None:
            raise UserError("set at most one of depth_sampling and loop_curriculum")
        layout = self.model.layout()
        if layout.r < 2:
            raise UserError(f"{recipe} varies the loop count up to the model's r: it needs model.r >= 2, got "
                            f"r={layout.r}")
        if self.model.bptt_k is not None:
            raise UserError(f"{recipe} back-propagates through every loop it runs: unset model.bptt_k (got "
                            f"{self.model.bptt_k})")
        if self.depth_sampling is not None and layout.injection == "hyperconnect":
            raise UserError("depth_sampling draws loop counts above r, and hyperconnection scalars exist for "
                            "r loops only; use another injection")

    @property
    def loop_recipe(self) -> str | None:
        """The config key of the run's loop-count recipe ("depth_sampling", "loop_curriculum"), else None."""
        if self.depth_sampling is not None:
            return "depth_sampling"
        return "loop_curriculum" if self.loop_curriculum is not None else None


    @property
    def batch_rows(self) -> int:
        """Sequences (packed rows) per optimiser step, over all ranks."""
        return self.batch_tokens // self.model.seq_len


def curriculum_fraction(loop_curriculum: str) -> Fraction:
    """F of ``loop_curriculum: linear:F``, exact (⌈F·S⌉ has no float rounding); UserError unless 0 < F < 1."""
    kind, _, value = loop_curriculum.partition(":")
    try:
        fraction = Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        fraction = None
    if kind.strip() not in CURRICULA or fraction is None or not 0 < fraction < 1:
        raise UserError(
            f"loop_curriculum must be 'linear:F' with a ramp fraction F in (0, 1) of the optimiser steps "
            f"(e.g. linear:0.25), got {loop_curriculum!r}"
        )
    return fraction


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``overrides`` into a copy of ``base`` (nested mappings merge, other values replace)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_train_config(
    yaml_path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> TrainConfig:
    """YAML file (optional) deep-merged with ``overrides`` (nested dict) → validated ``TrainConfig``.

    ``model.vocab_size`` and ``model.seq_len`` default to the dataset's (read from its meta.json) when the
    config does not set them, so a model always matches the rows it trains on.
    """
    data = load_yaml(yaml_path) if yaml_path else {}
    data = merge(data, overrides or {})
    model = data.get("model")
    if model is None or isinstance(model, dict):
        model = dict(model or {})
        missing = [k for k in ("vocab_size", "seq_len") if k not in model]
        if missing:
            from loopscale.data import PackedDataset

            data_section = data.get("data") or {}
            path = data_section.get("path", DEFAULT_DATASET) if isinstance(data_section, dict) else None
            if path:
                ds = PackedDataset(path)
                defaults = {"vocab_size": ds.vocab_size, "seq_len": ds.seq_len}
                model.update({k: defaults[k] for k in missing})
        data["model"] = model
    return from_dict(TrainConfig, data, "train")
