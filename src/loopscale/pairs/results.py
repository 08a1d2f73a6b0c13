"""The effect models' result (``pairs.effects.analyse_pairs``) as typed records (issue 42).

Each field is the JSON key that compare.json and price.json have held since the effect models landed, so a
published document reads back with ``PairedEffects.from_dict`` (a field added since has a default). Models
are named by ``EffectModel``, a closed set (``pairs.rule.model_name``); terms by ``Term``; numbers are
nats (losses and their changes), units of φ (Δφ) or as named. No field holds a sentence:
``loopscale.present.effect_text`` writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from loopscale.fit.results import ConfidenceInterval, Record

Term = Literal["every", "offset", "delta_phi"]
EffectModel = Literal[
    "tokens only",
    "every model",
    "offset",
    "delta phi",
    "every model + offset",
    "every model + delta phi",
    "offset + delta phi",
    "every model + offset + delta phi",
    "excess not attributed",
]
Shape = Literal["offset", "delta phi", "N multiplier", "D multiplier", "width slope"]
Pair = tuple[float, float]


@dataclass(frozen=True)
class PairRow(Record):
    """One seed-matched pair: the two runs' losses, the loss change (variant − base), the part the base
    law predicts from their N and D (``token_part``), the ``excess`` beyond it, each model's prediction."""

    budget: float
    width: float
    r: int
    seed: int | None
    base_loss: float
    variant_loss: float
    token_ratio: float
    change: float
    token_part: float
    excess: float
    predicted: dict[str, float]  # by EffectModel


@dataclass(frozen=True)
class LoopMeans(Record):
    """The pairs at one r: their count and mean change, token part, excess and predictions."""

    pairs: int
    change: float
    change_sd: float | None
    token_part: float
    excess: float
    token_ratio: float
    predicted: dict[str, float]


@dataclass(frozen=True)
class WidthMeans(Record):
    """The pairs at one width, plain or looped: their mean change and excess (the profile along size)."""

    width: float
    looped: bool
    pairs: int
    change: float
    excess: float


@dataclass(frozen=True)
class Separability(Record):
    """Whether the design tells an offset from Δφ: the looped r it holds, the cosine of the two columns over
    the looped pairs (``bound``: the largest that separates) and their condition number."""

    separable: bool
    reason: Literal["one looped r", "collinear"] | None
    looped_r: tuple[int, ...]
    cosine: float | None
    condition: float | None
    bound: float


# |Δφ| the fits stay within (compare.DELTA_BOUNDS); an interval the base law leaves unbounded is recorded to
# this edge (``pairs.effects``), and the words read an end there as open (``present.effect_text``)
DELTA_BOX = 3.0


@dataclass(frozen=True)
class ModelFit(Record):
    """One effect model fitted to the excess: its terms' values (0 for a term it lacks), and per term the
    estimate, SE (the pairs' and the base law's parts), the rule's critical value c and the interval (the
    values the test does not reject: estimate ± c·SE for a constant; before issue 49, estimate ± c·SE for
    every term); its residual sum of squares; whether its terms cancel each other."""

    every: float
    offset: float
    delta_phi: float
    rss: float
    parameters: int
    estimate: dict[str, float]
    se: dict[str, float]
    se_pairs: dict[str, float]
    se_base_law: dict[str, float]
    critical: dict[str, float]
    ci: dict[str, Pair]
    cancelling: bool
    terms: tuple[Term, ...]
    se_test: dict[str, float] | None = None  # SE₀, the term's own part taken out (None: read before issue 49)

    def value(self, term: str) -> float:
        return {"every": self.every, "offset": self.offset, "delta_phi": self.delta_phi}[term]

    def open_ends(self, term: str) -> tuple[bool, bool]:
        """Which ends of ``term``'s interval are unbounded: Δφ's ends recorded at ``DELTA_BOX`` (the test
        rejects no value beyond them). Intervals read before issue 49 (no ``se_test``) were estimate ± c·SE,
        never open."""
        if term != "delta_phi" or self.se_test is None:
            return False, False
        lo, hi = self.ci[term]
        return lo <= -DELTA_BOX, hi >= DELTA_BOX


@dataclass(frozen=True)
class TermTest(Record):
    """One test of the rule: its statistic, the simulated critical value at the look's size, its p."""

    statistic: float
    critical: float
    p: float


@dataclass(frozen=True)
class WildCluster(Record):
    """The wild cluster bootstrap-t's p per term (Webb weights): a second opinion on the rule's tests."""

    p: dict[str, float]
    draws: int
    weights: str


@dataclass(frozen=True)
class WidthTrend(Record):
    """The slope of the excess (left beyond a model) along log₁₀ width over the (r, width) cluster means:
    nats per decade, its SE (the base law's share), df, interval, p; ``varies``: the interval excludes 0;
    ``explained``: the share of the cluster means' spread the slope explains."""

    slope: float
    se: float
    se_base_law: float
    df: int
    ci: Pair
    p: float
    varies: bool
    explained: float


@dataclass(frozen=True)
class SlopeDifference(Record):
    """Plain − looped slope along width (SE² the sum, t on the smaller df)."""

    slope: float
    se: float
    df: int
    ci: Pair
    varies: bool


@dataclass(frozen=True)
class ScopeTrends(Record):
    """With r = 1 pairs: the excess's slope along width for plain and for looped models, and their
    difference; all None without r = 1 pairs."""

    plain: WidthTrend | None = None
    looped: WidthTrend | None = None
    difference: SlopeDifference | None = None


@dataclass(frozen=True)
class ShapeFit(Record):
    """One one-parameter shape fitted alone to the excess (``pairs.shapes``): estimate, SE, interval,
    the lack of fit's p and whether it describes the pairs; a multiplier's m and interval."""

    shape: Shape
    estimate: float
    se: float
    ci: Pair
    lack_of_fit_p: float | None
    consistent: bool | None
    multiplier: tuple[float | None, float | None, float | None] | None = None


@dataclass(frozen=True)
class Heterogeneity(Record):
    """The spread left beyond the chosen model (nats): (r, width) cluster sd, iid sd, I²."""

    cluster_sd: float
    iid_sd: float
    i2: float


@dataclass(frozen=True)
class PairNoise(Record):
    """The pairs' noise (nats): iid, (r, width) cluster, and the cluster sd's upper bound the simulations
    use."""

    iid: float
    cluster: float
    cluster_upper: float


@dataclass(frozen=True)
class ErrorModel(Record):
    """How the intervals read the errors: cluster-robust, or a known covariance (sd, cluster sd, df)."""

    kind: Literal["cluster-robust", "known"]
    sd: float | None = None
    cluster_sd: float | None = None
    df: int | None = None


@dataclass(frozen=True)
class Calibration(Record):
    """The rule on tables simulated with one truth: the share naming each model, wrong attribution,
    disagreement (named with an interval holding 0), power, each true term's power and coverage."""

    model: EffectModel
    truth: dict[str, float]
    chosen: dict[str, float]
    wrong_attribution: float
    disagreement: float
    power: float
    term_power: dict[str, float]
    coverage: dict[str, float]


@dataclass(frozen=True)
class TruthCalibration(Record):
    """One row of the calibration table (``pairs.rule.calibrate``): the truth's label ("tokens only", a
    model, "delta phi = +0.19") and the rule on tables simulated under it. ``PairedEffects.calibration``
    keys these rows by label."""

    label: str
    calibration: Calibration


@dataclass(frozen=True)
class PredictedShift(Record):
    """Per (budget, r): N*(variant) / N*(base) each model predicts (where both vertices are bracketed)."""

    budget: float
    r: int
    ratio: dict[str, float | None]


@dataclass(frozen=True)
class PairedEffects(Record):
    """What a recipe does, from seed-matched pairs (``pairs.effects.analyse_pairs``): the pairs and their
    profiles, what the design separates, every model's fit, the rule's tests and choice, the shape left,
    the noise, the calibration. ``calibration`` is keyed by truth ("tokens only", a model, "delta phi =
    +0.19"); ``models`` and predictions by ``EffectModel``."""

    pairs: tuple[PairRow, ...]
    n_pairs: int
    looped_pairs: int
    plain_pairs: int
    anchors: Literal["paired", "shared"]
    clusters: int
    per_r: dict[str, LoopMeans]
    per_width: tuple[WidthMeans, ...]
    base_form: str
    base_resamples: int
    terms: tuple[Term, ...]
    available: tuple[Term, ...]
    separability: Separability
    models: dict[str, ModelFit]
    tests: dict[str, TermTest]
    chosen: EffectModel
    chosen_terms: tuple[Term, ...]
    cancelling: bool
    trend: WidthTrend | None
    scope_trends: ScopeTrends
    heterogeneity: Heterogeneity
    noise: PairNoise
    errors: ErrorModel
    calibration: dict[str, Calibration]
    predicted_shift: tuple[PredictedShift, ...]
    simulations: int
    t_df: int
    ci_level: float
    shapes: tuple[ShapeFit, ...] = ()
    wild_cluster: WildCluster | None = None
    also_consistent: tuple[Shape, ...] = ()

    @property
    def inverted(self) -> bool:
        """Whether the intervals are the values each term's test does not reject, read through SE₀ (records
        since issue 49), rather than estimate ± c·SE (a record written before, rendered with its words)."""
        return any(m.se_test is not None for m in self.models.values())

    @property
    def chosen_model(self) -> ModelFit | None:
        """The fit of the model the rule named (None: tokens only, or the excess not attributed)."""
        return self.models[self.chosen] if self.chosen_terms else None

    def shape(self, name: str) -> ShapeFit:
        return next(row for row in self.shapes if row.shape == name)


# ---------------------------------------------------------------------------------------------------------
# A recipe priced in looks (``analysis.price``; price.json)


@dataclass(frozen=True)
class PooledClusterSd(Record):
    """The pairs' (r, width) sd (nats) learnt from the pairs so far with the base law's misfit as a prior
    worth ``prior_df`` clusters (``pairs.effects.pooled_cluster_sd``); ``estimate``: the pairs' own (None
    where no cluster holds two pairs)."""

    cluster_sd: float
    estimate: float | None
    df: int
    prior_sd: float
    prior_df: float


@dataclass(frozen=True)
class PricedLook(Record):
    """One look of ``price``: the pairs analysed, the test size spent, the hours the plan had reached, what
    the rule named, Δφ's half-width, the pooled noise, and why the looks stopped here (None: they went on)."""

    look: int
    pairs: int
    size: float
    spent: float
    hours_planned: float
    chosen: EffectModel
    chosen_terms: tuple[Term, ...]
    delta_phi_half_width: float | None
    cluster_sd: PooledClusterSd
    stop: Literal["decided", "precise", "last look"] | None
    critical: float | None = None  # the look's boundary on |t| (None: a plan from before issue 49)


@dataclass(frozen=True)
class SequentialCalibration(Record):
    """The stopping rule in the loop on simulated sequences (``pairs.sequential.summarise``):
    the share stopping at each look, naming each model at the stop, naming a term the truth lacks
    (``wrong``), naming a term whose interval holds 0 (``disagreement``), and the true model's intervals
    holding the truth at the stop (``coverage``; None for no effect)."""

    stopped_at: tuple[float, ...]
    chosen: dict[str, float]
    wrong: float
    disagreement: float
    coverage: float | None


BoundaryShape = Literal["obf", "pocock"]


@dataclass(frozen=True)
class Boundary(Record):
    """The looks' critical values (``pairs.sequential.scale_boundary``): c_k = ``scale``·f(t_k) on the
    rule's |t| (f(t) = t^(-1/2) for "obf", 1 for "pocock"), the scale set so that, in ``sequences``
    simulated sequences under the worst null truth, the chance that the looks stop naming a term the truth
    lacks, or with the true model's interval missing the truth, is ``target`` (α less its Monte Carlo
    margin). ``levels``: each look's interval level, 1 − the share of simulated null |t| beyond c_k
    ((1 + count)/(1 + sequences), the worst term of the full model, no effect); ``spent``: the chance,
    worst null truth, of a wrong name by look k."""

    shape: BoundaryShape
    alpha: float
    target: float
    sequences: int
    scale: float
    critical: tuple[float, ...]
    levels: tuple[float, ...]
    spent: tuple[float, ...]


@dataclass(frozen=True)
class PlanSeparation(Record):
    """How well a plan's pairs tell the terms apart before any is trained (``design.separate``): the
    criterion that chose them, the cosine of the offset and ∂L/∂φ columns over its looped pairs and their
    condition number, the design SE of Δφ beyond an offset (φ), each term's design SE in the rule's model
    (every and offset in nats, the width slope in nats per decade of width; None: not estimable), all under
    the pairs' known errors (the base law's uncertainty comes on top), and how many of its pairs are r = 1
    pairs (``plain``) or need a base extension run (``extension``)."""

    criterion: str
    cosine: float
    condition: float
    se_delta_phi: float
    se_every: float | None
    se_offset: float | None
    se_width: float | None
    plain: int
    extension: int


@dataclass(frozen=True)
class PricePlan(Record):
    """The looks planned: at most ``most`` pairs within the hour cap, a look after each count of pairs in
    ``counts`` at its test size (one minus its interval level), and the planned hours each pair reaches.
    ``boundary``: the looks' critical values; None in plans that spent α by Lan–DeMets (Pocock type) with a
    union bound, before issue 49. ``separation``: what the plan's pairs tell apart (issue 51)."""

    most: int
    counts: tuple[int, ...]
    sizes: tuple[float, ...]
    hours: tuple[float, ...]
    boundary: Boundary | None = None
    separation: PlanSeparation | None = None  # absent in plans before issue 51


@dataclass(frozen=True)
class PowerRow(Record):
    """The power of a plan to name one truth: ``term`` at ``size`` (nats, or φ for Δφ), named when the
    sequence stops at a look whose chosen model holds ``named_as`` (an every-model change is ``offset``
    where the plan has no r = 1 pairs). ``pairs``/``hours``: the smallest plan over the base's cells with
    at least the target power (None: none reaches it)."""

    term: Term
    size: float
    named_as: Term
    power: float
    pairs: int | None
    hours: float | None


@dataclass(frozen=True)
class PlanPower(Record):
    """What a plan can decide before it spends (``analysis.price.plan_power``): for the plan of ``pairs``
    pairs within ``hours``, its boundary and each truth's power over ``sequences`` simulated sequences with
    the stopping rule in the loop, and where the search for ``target`` power looked (up to ``most_pairs``
    pairs, ``most_hours`` hours: every looped cell of the base)."""

    hours: float
    pairs: int
    sequences: int
    target: float
    boundary: Boundary
    rows: tuple[PowerRow, ...]
    most_pairs: int
    most_hours: float


@dataclass(frozen=True)
class PriceResult(Record):
    """price.json: the recipe, its base (relative path), the settings (paths relative to the folder), the
    plan, every look so far and the last look's effect models; ``against``: the arm paired with, if not the
    base."""

    recipe: str
    base: str
    settings: dict[str, Any]
    plan: PricePlan
    looks: tuple[PricedLook, ...]
    effects: PairedEffects | None
    power: PlanPower | None = None  # the plan's power, before it spent (None: a plan from before issue 49)
    # the other priced arm the pairs were read against (relative path), the law staying ``base``'s; None: the
    # base's own runs
    against: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As every record, less ``against`` where it is None: a price against its base writes the
        price.json it wrote before ``price --against`` existed."""
        doc = super().to_dict()
        if self.against is None:
            del doc["against"]
        return doc


# ---------------------------------------------------------------------------------------------------------
# Loops at test time (``pairs.test_time``, ``loopscale eval-depth``)

TEST_TIME_SCHEMA = 1
Relation = Literal["1", "r/2", "2r"]


@dataclass(frozen=True)
class TestTimeRun(Record):
    """One looped run's validation loss (nats/token over ``val_tokens`` val-split targets) at each test-time
    loop count. ``published_val_loss`` is the run's result.json; ``weights`` says whether the weights were
    the run's own or retrained from its config.yaml, whose final val loss was ``retrained_val_loss``."""

    __test__ = False  # not a pytest class

    schema: int
    run: str
    train_r: int
    test_r: tuple[int, ...]
    val_loss: tuple[float, ...]
    val_tokens: int
    threads: int
    weights: Literal["run", "retrained"]
    published_val_loss: float
    retrained_val_loss: float | None = None

    def at(self, loops: int) -> float:
        return self.val_loss[self.test_r.index(loops)]

    @property
    def reproduction_gap(self) -> float:
        """|the evaluation at the trained r − the published val loss| (nats): 0 up to float noise when the
        weights are the run's, the retraining's drift otherwise."""
        return abs(self.at(self.train_r) - self.published_val_loss)


@dataclass(frozen=True)
class TestTimePair(Record):
    """A seed-matched pair's evaluations: the base run and the recipe's run at the same cell."""

    __test__ = False

    budget: float
    width: int
    r: int
    seed: int
    base: TestTimeRun
    variant: TestTimeRun


@dataclass(frozen=True)
class TestTimeGain(Record):
    """The recipe's effect at one relation: the mean over pairs of (variant change − base change), where a
    change is L(test-time loops) − L(trained r) in nats. ``p``: two-sided t test of a zero mean."""

    __test__ = False

    relation: Relation
    pairs: int
    base_change: float
    variant_change: float
    difference: float
    ci: ConfidenceInterval
    p: float


@dataclass(frozen=True)
class TestTimeCurve(Record):
    """The pairs trained at one r: mean change (nats) at each test-time count, both arms, with t half-widths
    at ``FAMILY_LEVEL`` (the figure's error bars; 0 where one pair leaves no spread)."""

    __test__ = False

    train_r: int
    pairs: int
    test_r: tuple[int, ...]
    base_change: tuple[float, ...]
    variant_change: tuple[float, ...]
    base_half_width: tuple[float, ...]
    variant_half_width: tuple[float, ...]


@dataclass(frozen=True)
class TestTimeDepth(Record):
    """An arm's test-time analysis (the arm folder's test_time.json)."""

    __test__ = False

    schema: int
    recipe: str
    pairs: tuple[TestTimePair, ...]
    level: float  # each relation's interval level (Bonferroni over the relations present)
    gains: tuple[TestTimeGain, ...]
    curves: tuple[TestTimeCurve, ...]
    largest_reproduction_gap: float  # nats, over every run evaluated (TestTimeRun.reproduction_gap)
