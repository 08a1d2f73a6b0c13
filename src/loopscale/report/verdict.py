"""The first screen of a report and the CLI's one line: the law check's verdict, φ with its intervals (bold
only when identified by a law the law check does not reject), the table of headline numbers, and the summary
under the key figures (why φ is not identified, the count baselines, the fit quality). Losses in nats."""

from __future__ import annotations

from loopscale.fit.labels import flops_label
from loopscale.fit.protocol_results import ProtocolResult
from loopscale.fit.results import LawCheck
from loopscale.pairs.case_study_results import CaseStudy
from loopscale.present.identification import identification_reasons
from loopscale.present.law_check import law_headline
from loopscale.present.numbers import interval
from loopscale.report.document import Bullets, Section, Table
from loopscale.report.formatting import intervals_text, main_interval_text, num, rejected

#: The runs measure the law only when at least this share of the finished ones beats the bigram table.
BELOW_BIGRAM_SHARE = 0.9


def pipeline_check(below_bigram: tuple[int, int, float] | None) -> str | None:
    """ "most runs are above a bigram table (4.078 nats): a pipeline check, not a measurement" when fewer
    than ``BELOW_BIGRAM_SHARE`` of the finished runs beat it (``below_bigram`` = (below, finished, bigram
    loss in nats)); None otherwise or without baselines."""
    if below_bigram is None:
        return None
    below, finished, loss = below_bigram
    if below >= BELOW_BIGRAM_SHARE * finished:
        return None
    above = finished - below
    who = "most runs are" if 2 * above > finished else f"{above} of {finished} runs are"
    return f"{who} above a bigram table ({loss:.3f} nats): a pipeline check, not a measurement"


def law_verdict(doc: ProtocolResult) -> str:
    """The first sentence of the report and of the CLI line: what the law check (fit.json
    ``law_check``) says about the law, without φ. Rejected: its headline, the strongest evidence;
    inconclusive: no test rejects, and the φ-trend test had too little power to."""
    check = doc.law_check
    if check is None:
        return "law not checked (fit.json predates the law check)"
    if check.verdict == "untestable":
        return f"the law could not be checked: {law_headline(check)}"
    return law_headline(check)


def per_budget_text(check: LawCheck) -> str:
    """φ per budget with its CI (the law check's refits with E, α, β held), one phrase. The budget halves
    stay in the law-check section: whole-law refits on half the budgets have CI ends that a different
    resample seed moves across 0 (``fit.lawcheck.phi_halves``), which a lead must not rest on."""
    items = [
        f"C = {flops_label(row.budget)}: {num(row.phi, '{:.2f}')} "
        + interval(row.ci, 2, missing="[–]", open_missing=False)
        for row in check.per_budget_phi
    ]
    return "per budget " + "; ".join(items) if items else "no per-budget φ"


def _law_holds(doc: ProtocolResult) -> bool:
    """The law check says "holds" (which ``fit.results.LawCheck`` refuses beside a lack of fit below 1%: a
    law with p = 0.002 for its lack of fit passes the family level of eight tests, but is only "not
    rejected")."""
    return doc.law_check is not None and doc.law_check.verdict == "holds"


def _unconfirmed(doc: ProtocolResult) -> str:
    """Why a φ under a law that is not rejected is still no measurement: the check had too little power,
    its lack of fit is below 1%, or it could not run."""
    check = doc.law_check
    verdict = None if check is None else check.verdict
    if verdict == "inconclusive":
        return "given a law these runs are too few to test"
    if verdict == "not rejected":
        return f"given a law not rejected (lack of fit p = {check.lack_of_fit.p:.2g}), not confirmed"
    return "given a law not checked on these runs"


def phi_phrase(doc: ProtocolResult) -> str | None:
    """φ in the CLI line: "phi not identified (the point fit's -2.25 is no measurement)" when the protocol
    says so, else the value with its intervals, marked when the constant-φ law is rejected or not shown to
    hold; None for the plain law."""
    phi = doc.fit.phi
    if phi is None:
        return None
    if doc.phi_identified is False:
        return f"phi not identified (the point fit's {phi:.2f} is no measurement)"
    details = [intervals_text(doc) or "no interval computed"]
    if rejected(doc):
        details.insert(0, "constant-φ law, rejected")
    elif not _law_holds(doc):
        details.insert(0, _unconfirmed(doc))
    return f"phi = {phi:.3f} ({'; '.join(details)})"


def summary_line(
    doc: ProtocolResult,
    fitted: int,
    planned: int,
    skipped,
    sweep: str,
    bigram: tuple[int, int, float] | None = None,
) -> str:
    """The CLI's one line (the last line of ``loopscale report`` and ``loopscale demo``): whether the runs
    are a measurement at all (``pipeline_check``), the law check's verdict, then φ (``phi_phrase``), R², the
    runs fitted and how many runs are below the bigram table (``bigram`` = (below, finished runs, its loss
    in nats); None when the baselines are not available)."""
    lead = "; ".join(part for part in (pipeline_check(bigram), law_verdict(doc).rstrip(".")) if part)
    phi = phi_phrase(doc)
    if bigram is None:
        beside = "bigram table not available"
    else:
        below, finished, loss = bigram
        beside = f"{below} of {finished} runs below the bigram table ({loss:.3f} nats)"
    return (
        f"{lead}. {phi + ', ' if phi else ''}R² = {doc.fit.r2:.4f}, {fitted} of {planned} runs fitted"
        + (f", {len(skipped)} left out" if skipped else "")
        + f", {beside} [sweep {sweep}]"
    )


def phi_statement(doc: ProtocolResult) -> str:
    """φ with its intervals: bold only when identified by a law the law check says holds; no number when
    the protocol says φ is not identified (the point fit is under Law fits); beside φ per budget when the
    constant-φ law is rejected."""
    phi = doc.fit.phi
    if phi is None:
        return "The plain Chinchilla law has no φ."
    if doc.settings.fix_phi is not None:
        return f"φ fixed at {phi:g} (not fitted)."
    check = doc.law_check
    if doc.phi_identified is False:
        tail = f"; the constant-φ law is rejected too: {per_budget_text(check)}" if rejected(doc) else ""
        return (
            "φ is not identified by these runs: no value of it is a measurement (why: Summary; the point "
            f"fit and its intervals: Law fits){tail}."
        )
    intervals = intervals_text(doc)
    if rejected(doc):
        return (
            f"φ = {phi:.3f} is the constant-φ law's single number, which these runs reject: "
            f"{intervals or 'no interval computed'}; {per_budget_text(check)}."
        )
    tail = f": {intervals}." if intervals else " (no interval computed)."
    if doc.phi_identified is None:
        return f"φ = {phi:.3f} (identification not assessed){tail}"
    if not _law_holds(doc):
        return f"φ = {phi:.3f}, {_unconfirmed(doc)}{tail}"
    return f"**φ = {phi:.3f}**{tail}"


def quality_statement(doc: ProtocolResult) -> str:
    return (
        f"R² = {doc.fit.r2:.4f} (raw losses, nats) beside the objective that was minimised: "
        f"{doc.fit.objective:.3e} (summed Huber, δ = {doc.settings.huber_delta:g}, on log loss); "
        "why the two can rank forms differently: see Law fits."
    )


def lead_blocks(doc: ProtocolResult, below_bigram: tuple[int, int, float] | None = None) -> list:
    """The verdict under the title, each thing once: that the runs are a pipeline check when too few beat
    the bigram table, the law check's verdict with φ and ``ci.phi`` in the same paragraph when the law
    holds; otherwise the verdict, then φ (with φ per budget when the law is rejected) in the next one."""
    check = pipeline_check(below_bigram)
    verdict = f"**Verdict:** {check + '; ' if check else ''}{law_verdict(doc).rstrip('.')}"
    if _law_holds(doc):
        return [f"{verdict}; {phi_statement(doc)}"]
    return [f"{verdict}.", phi_statement(doc)]


def summary_section(doc: ProtocolResult, fitted: int, planned: int, baseline: str | None = None) -> Section:
    """Under the key figures: why φ is not identified, the count baselines (a φ measured on runs worse than
    a bigram table is about token statistics, not language, whatever the fit says), the fit quality and
    the runs fitted."""
    blocks: list = []
    reasons = identification_reasons(doc.diagnostics)
    if doc.phi_identified is False and reasons:
        blocks += ["Why φ is not identified:", Bullets(reasons)]
    if baseline:
        blocks.append(baseline)
    blocks.append(quality_statement(doc))
    blocks.append(f"{fitted} of {planned} planned runs fitted.")
    return Section("Summary", blocks)


def headline_table(
    doc: ProtocolResult, fitted: int, planned: int, below_bigram, delta_phi: dict | None = None
) -> Table:
    """The headline numbers in one row: φ (and what it is), its reported interval, the runs fitted and below
    the bigram table (``below_bigram`` = (below, finished, bigram loss in nats) or None), the seed noise σ
    (nats), the lack-of-fit test, and for a case study the pooled Δφ (``delta_phi``: compare.json's)."""
    phi = doc.fit.phi
    identified = {True: "identified", False: "not identified"}.get(doc.phi_identified, "")
    # both words when both hold: an unidentified φ is never shown as if only the law were in question
    status = "; ".join(w for w in ("law rejected" if rejected(doc) else "", identified) if w)
    check = doc.law_check
    sigma = None if check is None else check.noise.sigma
    lof = None if check is None else check.lack_of_fit
    lof_name = "F" if lof is not None and lof.test == "F" else "χ²"
    header = ["φ", "interval", "runs fitted", "below bigram", "seed noise σ", "lack of fit"]
    if phi is None:
        phi_cell, interval_cell = "–", "not computed"
    elif doc.phi_identified is False:  # no number for a φ the runs do not pin down
        phi_cell, interval_cell = status, "none (φ not identified)"
    else:
        phi_cell = f"{phi:.3f}" + (f" ({status})" if status else "")
        interval_cell = main_interval_text(doc) if doc.phi_ci else "not computed"
    row = [
        phi_cell,
        interval_cell,
        f"{fitted} of {planned}",
        "not available" if below_bigram is None else f"{below_bigram[0]} of {below_bigram[1]}",
        "not known" if sigma is None else f"{sigma:.4f} nats",
        "not run"
        if lof is None
        else f"{lof_name} = {num(lof.statistic, '{:.2f}')}, p = {num(lof.p, '{:.2g}')}",
    ]
    if delta_phi is not None:
        header.append("effect of the variant")
        row.append(effect_cell(delta_phi))
    return Table(header, [row])


def effect_cell(case: CaseStudy) -> str:
    """The case study's effect in one cell: the effect model the matched pairs choose, with its size and
    interval (``pairs.effects``), else the shared-nuisance Δφ."""

    def value(estimate: float, ci, unit: str = "") -> str:  # "+0.123 nats [lo, hi]", no interval: nothing
        return f"{estimate:+.3f}{unit}" + ("" if ci is None else " " + interval(ci, signed=True))

    if case.effects is None:
        return f"Δφ {value(case.delta_phi.estimate, case.delta_phi.ci)} (shared fit)"
    e = case.effects
    phi = e.models["delta phi"]
    varies = e.trend is not None and e.trend.varies
    if not e.chosen_terms:
        label = f" ({e.chosen})"
        shape = ", excess left varies with width" if varies else ""
        return f"Δφ {value(phi.delta_phi, phi.ci['delta_phi'])}{label}{shape}"
    m = e.chosen_model
    names = {"every": "every model", "offset": "offset (looped)", "delta_phi": "Δφ"}
    units = {"every": " nats", "offset": " nats", "delta_phi": ""}
    cell = " and ".join(f"{names[t]} {value(m.value(t), m.ci[t], units[t])}" for t in e.chosen_terms)
    if varies:
        cell += ", not one constant: varies with width"
    return cell + ("" if "delta_phi" in e.chosen_terms else ", not Δφ")
