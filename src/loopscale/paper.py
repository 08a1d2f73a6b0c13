"""The paper's published constants (method §5, §7, §9): grids, recipe, coefficients.

Only numbers live here; everything computed from them (N, F, steps, D) comes from ``accounting``.
"""

from __future__ import annotations

from dataclasses import replace

from loopscale.accounting import count_params, flops_per_token, steps_for_budget
from loopscale.config import ModelConfig

BATCH_TOKENS = 262_144  # 2^18 = 128 × 2048
SEQ_LEN = 2048
# The authors' tokenizer: Llama-2's 32,000 tokens + 1 special (method §2.7, §13). Logits are sliced to it;
# wte, lm_head and the FLOPs count use the padded size (ModelConfig.padded_vocab = 32,064).
VOCAB = 32_001
PADDED_VOCAB = 32_064
RS = (1, 2, 4, 8)

# Main grid (method §5.1): budget C in FLOPs → width scales s (d = 64·s).
MAIN_GRID: dict[float, tuple[int, ...]] = {
    4.64e17: (6, 8, 10, 12),
    1.00e18: (6, 8, 10, 12, 14),
    2.15e18: (8, 10, 12, 14, 16),
    4.64e18: (10, 12, 14, 16, 18, 20),
    1.00e19: (12, 16, 18, 20, 24),
    2.15e19: (18, 24, 28, 34),
}
# Case-study grids (method §5.3): r ∈ {2, 4, 8} rerun; the r = 1 runs of the four lower budgets are shared.
TRUNCATED_BPTT_GRID: dict[float, tuple[int, ...]] = {
    4.64e17: (6, 8, 10, 12),
    1.00e18: (6, 8, 10, 12, 14, 16),
    2.15e18: (8, 10, 12, 14, 16, 18),
    4.64e18: (10, 12, 14, 16, 18, 20, 22),
}
HYPERCONNECTION_GRID: dict[float, tuple[int, ...]] = {
    4.64e17: (6, 8, 10, 12),
    1.00e18: (6, 8, 10, 12, 14),
    2.15e18: (8, 10, 12, 14, 16, 18),
    4.64e18: (10, 12, 14, 16, 18, 20),
}

# The published joint fit (project page, "corrected" fit; method §9.2).
JOINT_FIT = {"A": 28.027, "alpha": 0.19924, "B": 915.82, "beta": 0.36863, "E": 1.56773, "phi": 0.459}
PHI_CI = (0.41, 0.53)
BASELINE_FOUR_BUDGET_PHI = 0.453
PAPER_EFFECTS = {"truncated BPTT": -0.073, "hyperconnections": 0.193}  # method §9.11: 0.453 → 0.380 / 0.646


def paper_template() -> ModelConfig:
    """The paper's iso-depth template (depth 20, prelude/coda 2, vocab 32,064, T = 2048)."""
    return ModelConfig(vocab_size=VOCAB, seq_len=SEQ_LEN)


def grid_runs(
    grid: dict[float, tuple[int, ...]],
    rs: tuple[int, ...] = RS,
    template: ModelConfig | None = None,
    batch_tokens: int = BATCH_TOKENS,
    width_unit: int = 64,
) -> list[dict]:
    """One dict per (budget, width, r) with the exact accounting: the rows of method §5.2.

    ``template`` carries everything but width and r (paper defaults: depth 20, prelude/coda 2, T 2048,
    vocab 32,001 padded to 32,064).
    """
    template = template or paper_template()
    runs = []
    for budget, scales in grid.items():
        for s in scales:
            for r in rs:
                cfg = replace(template, width=width_unit * s, r=r)
                cfg.validate()
                counts = count_params(cfg)
                f = flops_per_token(cfg)
                steps = steps_for_budget(budget, f, batch_tokens)
                runs.append(
                    {
                        "budget": budget,
                        "width": cfg.width,
                        "r": r,
                        "n": counts.n,
                        "n_once": counts.n_once,
                        "n_rec": counts.n_rec,
                        "flops_per_token": f,
                        "steps": steps,
                        "tokens": steps * batch_tokens,
                    }
                )
    return runs


def ceil_half(r: int) -> int:
    """Parcae's truncation window k = ⌈r/2⌉ used in the truncated-BPTT case study."""
    return -(-r // 2)


def paper_effect(name: str) -> tuple[str, float] | None:
    """The paper's Δφ for a variant whose name says which case study it is (method §9.11)."""
    lowered = name.lower()
    for key, value in PAPER_EFFECTS.items():
        if key.split()[0].lower()[:8] in lowered.replace("-", " "):
            return key, value
    return None
