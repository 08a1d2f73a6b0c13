"""``loopscale fit``, ``equiv`` and ``compare``: fit the law to a results table, read off equivalences, Δφ."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

# The law's forms (fit.law.FORMS), listed here so that the parser does not import SciPy.
FORM_CHOICES = ["paper", "phi-trend-c", "phi-trend-n", "e-per-r"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fit", help="fit the joint law (phi) or the Chinchilla law to a results table")
    p.add_argument("table", help="results table: .csv, .jsonl or .parquet (one row per run)")
    p.add_argument("--law", choices=["joint", "chinchilla"], default="joint")
    p.add_argument(
        "--fix-phi", type=float, help="fix phi at this value instead of fitting it (= --fix phi=X)"
    )
    _add_held_flags(p, "E, A, B, alpha, beta, phi", "phi's CI")
    p.add_argument("--restarts", type=int, default=500, help="random starts per fit (default 500)")
    p.add_argument(
        "--bootstrap", type=int, default=200, help="cell bootstrap resamples (0: none; default 200)"
    )
    p.add_argument(
        "--bootstrap-restarts",
        type=int,
        help="random starts per bootstrap refit on top of the warm start and 10 VarPro starts (default 2)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--split",
        choices=["paper", "ls"],
        default="paper",
        help="N_once/N_rec split: the paper's (default) or the project page's least squares",
    )
    p.add_argument(
        "--model-config",
        help="architecture template of the compute-optimal FLOPs model: flat model keys, a run's "
        "config.yaml, a sweep.yaml, or a sweep / run folder; default: the sweep the table came from "
        "(sweep.yaml or runs/*/config.yaml next to it), else the paper's template",
    )
    p.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the profile-likelihood interval for phi (a second interval beside the bootstrap's)",
    )
    p.add_argument(
        "--form",
        choices=FORM_CHOICES,
        default="paper",
        help="the law's form: the paper's (default) or a one-parameter extension: phi trending per decade "
        "of compute (phi-trend-c) or of model size (phi-trend-n), or a loop-dependent floor E*r^kappa "
        "(e-per-r); derived numbers say which form they came from",
    )
    p.add_argument(
        "--noise",
        type=float,
        help="run-to-run noise of the final loss in nats, for the lack-of-fit test when the table has no "
        "replicate seeds (replicates win when it has)",
    )
    p.add_argument(
        "--no-law-check",
        dest="law_check",
        action="store_false",
        help="skip the law check (leave-one-budget-out, lack of fit, constant-phi tests)",
    )
    p.add_argument(
        "--check-resamples",
        type=int,
        help="bootstrap resamples for the law check's CIs (0: none; the verdict does not use them; "
        "default: min(100, --bootstrap))",
    )
    p.add_argument("--json", dest="json_out", help="write the full result document to this file")
    p.add_argument("--plots", help="write figures (PNG + SVG) into this folder")
    p.set_defaults(func=run_fit)

    p = sub.add_parser("equiv", help="equivalent non-looped size of a looped model (N_eff, r^phi, cost)")
    p.add_argument("--phi", type=float, help="worth exponent phi (or take it from --fit)")
    p.add_argument("--fit", dest="fit_json", help="a `loopscale fit --json` document to take phi from")
    p.add_argument("--r", type=int, required=True, help="loop count of the looped model")
    p.add_argument(
        "--params",
        type=float,
        required=True,
        help="non-embedding parameters of the non-looped (r = 1) model at the same width",
    )
    p.add_argument(
        "--model-config",
        help="architecture template (model keys, a run's config.yaml, a sweep.yaml or folder); default: "
        "the template recorded in --fit, else the paper's",
    )
    p.add_argument(
        "--bptt-k",
        type=int,
        help="the looped model trains with truncated BPTT through its last K loops (FLOPs as trained); "
        "default: the k recorded for --r in --fit, else full BPTT",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run_equiv)

    p = sub.add_parser(
        "compare",
        help="delta-phi of a recipe change: base and variant tables sharing the r = 1 runs (shared-nuisance "
        "fit, random-effects bootstrap, F-test; the paper's separate fits beside it)",
    )
    p.add_argument(
        "base", help="baseline results table or sweep folder (every r, r = 1 included)"
    )
    p.add_argument(
        "variant",
        help="variant results table or sweep folder, e.g. a `price` folder (its looped runs; r = 1 anchors "
        "may be listed)",
    )
    p.add_argument(
        "--form",
        default="auto",
        choices=["auto", *FORM_CHOICES],
        help="law form of the shared fit (default auto: the base's selected form when its law check "
        "rejects the paper's law, else the paper's)",
    )
    p.add_argument("--name", help="what the variant is, for the verdict (default: the variant's folder)")
    _add_held_flags(p, "E, A, B, alpha, beta", "delta phi's CI")
    p.add_argument("--restarts", type=int, default=500)
    p.add_argument("--bootstrap", type=int, default=200, help="random-effects bootstrap resamples")
    p.add_argument("--bootstrap-restarts", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--noise", type=float, help="run-to-run noise in nats for the law checks (tables without replicates)"
    )
    p.add_argument(
        "--no-law-check", dest="law_check", action="store_false", help="skip the law check of both arms"
    )
    p.add_argument("--json", dest="json_out", help="write the result document (compare.json) to this file")
    p.set_defaults(func=run_compare, check_resamples=None, law="joint", fix_phi=None)


def _add_held_flags(p: argparse.ArgumentParser, names: str, interval: str) -> None:
    """--fix and --prior (parsed by ``_held``) of ``fit`` and ``compare``."""
    p.add_argument(
        "--fix",
        action="append",
        metavar="NAME=V[,NAME=V]",
        help=f"hold parameters at these values: any of {names} (E, A, B in natural units), "
        "e.g. --fix alpha=0.199,beta=0.369",
    )
    p.add_argument(
        "--prior",
        metavar="paper|FIT.json",
        help="hold alpha, beta, E at the published joint fit (paper) or at a `fit --json` document's fit; "
        f"a document's bootstrap samples are resampled per bootstrap refit, so {interval} carries them",
    )


def _template(path: str | None):
    """``--model-config`` → (ModelConfig, source) or (None, None)."""
    from loopscale.fit.template import load_template

    return (None, None) if path is None else load_template(path)


def _check_fit_counts(args: argparse.Namespace, *, min_bootstrap: int) -> None:
    """Refuse out-of-range fit flags before SciPy loads (one-line UserError naming the flag).

    ``min_bootstrap``: 0 where the bootstrap is optional (``fit``; 0 means none), 2 where it is the result
    (``compare``); a bootstrap needs at least 2 resamples."""
    from loopscale.errors import UserError

    if args.restarts < 1:
        raise UserError(f"--restarts must be >= 1, got {args.restarts}")
    if args.bootstrap < min_bootstrap or args.bootstrap == 1:
        least = "0 (no bootstrap) or >= 2" if min_bootstrap == 0 else ">= 2"
        raise UserError(f"--bootstrap must be {least} resamples, got {args.bootstrap}")
    if args.bootstrap_restarts is not None and args.bootstrap_restarts < 0:
        raise UserError(f"--bootstrap-restarts must be >= 0, got {args.bootstrap_restarts}")


def _check_fix_phi(fix_phi: float | None) -> None:
    from loopscale.errors import UserError
    from loopscale.fit.law import LOWER, PHI, UPPER

    if fix_phi is not None and not LOWER[PHI] <= fix_phi <= UPPER[PHI]:
        raise UserError(f"--fix-phi must lie in [{LOWER[PHI]:g}, {UPPER[PHI]:g}], got {fix_phi}")


def _check_something_free(held, fix_phi: float | None) -> None:
    """Refuse a fit with every parameter of the law held (--fix, --fix-phi, --prior): nothing to fit."""
    from loopscale.errors import UserError
    from loopscale.fit.priors import LABEL_TO_THETA

    if fix_phi is not None and held is not None and set(LABEL_TO_THETA) - {"phi"} <= set(held.values):
        raise UserError(
            "nothing to fit: every parameter is fixed (E, A, B, alpha, beta, phi); leave at least one "
            "(e.g. phi) out of --fix / --fix-phi / --prior to fit it"
        )


def _held(args: argparse.Namespace):
    """--fix and --prior → fit.priors.Held (or None); ``--fix phi=V`` becomes ``args.fix_phi`` = V, the one
    code path of ``--fix-phi V``. Bad input: one-line UserError, before SciPy loads."""
    from loopscale.errors import UserError
    from loopscale.fit.priors import build_held, parse_fix

    fix = parse_fix(args.fix)
    if "phi" in fix:
        if args.fix_phi is not None and args.fix_phi != fix["phi"]:
            raise UserError(f"--fix phi={fix['phi']:g} disagrees with --fix-phi {args.fix_phi:g}; give one")
        args.fix_phi = fix.pop("phi")
    if (fix or args.prior) and args.law != "joint":
        raise UserError("--fix and --prior hold parameters of the joint law; drop --law chinchilla")
    return build_held(fix, args.prior, phi_fixed=args.fix_phi is not None)


def _check_law_flags(args: argparse.Namespace) -> None:
    """--form, --noise, --check-resamples: refuse bad combinations before SciPy loads."""
    import math

    from loopscale.errors import UserError

    if args.noise is not None and not (math.isfinite(args.noise) and args.noise > 0):
        raise UserError(f"--noise must be a positive number of nats, got {args.noise}")
    if args.check_resamples is not None and (args.check_resamples < 0 or args.check_resamples == 1):
        raise UserError(f"--check-resamples must be 0 (none) or >= 2, got {args.check_resamples}")
    if args.form not in ("paper", "auto") and (args.law != "joint" or args.fix_phi is not None):
        raise UserError(f"--form {args.form} extends the joint law with phi free; drop --law/--fix-phi")


def _check_output_paths(json_out: str | None, plots: str | None) -> None:
    """Refuse output paths that cannot be written before any fitting is done (one-line UserError)."""
    from loopscale.io import check_output

    if json_out is not None:
        check_output(json_out, "--json", folder=False)
    if plots is not None:
        check_output(plots, "--plots", folder=True, kind="plots")


def run_fit(args: argparse.Namespace) -> int:
    from loopscale.fit.table import load_table
    from loopscale.fit.template import template_for_table
    from loopscale.io import atomic_write_json, claim_folder

    _check_fit_counts(args, min_bootstrap=0)
    held = _held(args)
    _check_fix_phi(args.fix_phi)
    _check_something_free(held, args.fix_phi)
    _check_law_flags(args)
    _check_output_paths(args.json_out, args.plots)
    table = load_table(args.table)
    template, source = _template(args.model_config)
    if template is None:
        template, source = template_for_table(args.table, table.run)
    # SciPy (and, for --plots, matplotlib) load only now that the arguments are checked
    from loopscale.fit.bootstrap import BOOTSTRAP_RESTARTS
    from loopscale.fit.protocol import run_protocol
    from loopscale.present.fit_text import protocol_text
    from loopscale.present.plots import plot_protocol

    protocol = run_protocol(
        table,
        law=args.law,
        fix_phi=args.fix_phi,
        restarts=args.restarts,
        bootstrap=args.bootstrap,
        bootstrap_restarts=BOOTSTRAP_RESTARTS if args.bootstrap_restarts is None else args.bootstrap_restarts,
        seed=args.seed,
        flops_model=template,
        split=args.split,
        template_source=source,
        profile=args.profile,
        form=args.form,
        noise=args.noise,
        law_check=args.law_check,
        check_resamples=args.check_resamples,
        held=held,
    )
    print(protocol_text(protocol.result()))
    if args.json_out:
        atomic_write_json(args.json_out, protocol.to_dict())
        print(f"wrote {args.json_out}")
    if args.plots:
        paths = plot_protocol(protocol, table, claim_folder(args.plots, "plots"))
        print(f"wrote {len(paths)} figure files to {args.plots}")
    return 0


def run_equiv(args: argparse.Namespace) -> int:
    from loopscale.config import ModelConfig, from_dict
    from loopscale.errors import UserError
    from loopscale.fit.results import law_check_in
    from loopscale.present.law_check import law_headline

    phi = args.phi
    template, source = _template(args.model_config)
    note = None
    bptt_k = args.bptt_k
    if args.fit_json:
        path = Path(args.fit_json)
        try:
            doc = json.loads(path.read_text())
            fitted = doc["fit"]["phi"]
        except FileNotFoundError:
            raise UserError(f"fit document not found: {path}") from None
        except (json.JSONDecodeError, KeyError, TypeError, IsADirectoryError, UnicodeDecodeError):
            raise UserError(f"{path}: not a joint-law `loopscale fit --json` document (no fit.phi)") from None
        if not isinstance(fitted, int | float) or isinstance(fitted, bool):
            raise UserError(f"{path}: fit.phi is not a number ({fitted!r})")
        if phi is not None and phi != fitted:
            raise UserError(f"--phi {phi} disagrees with phi = {fitted} in {path}; give one of them")
        phi = fitted
        recorded = ((doc.get("settings") or {}).get("template") or {}).get("model")
        if template is None and isinstance(recorded, dict):
            template = from_dict(ModelConfig, recorded, f"{path}: settings.template.model")
            source = f"the template recorded in {path}"
        recorded_k = ((doc.get("compute_optimal") or {}).get("bptt_k") or {}).get(str(args.r))
        if bptt_k is None and isinstance(recorded_k, int):
            bptt_k = recorded_k
        diagnostics = doc.get("diagnostics") or {}
        check = law_check_in(doc, path)
        form = doc.get("form") or "paper"
        if check is not None and check.verdict == "rejected":
            note = f"note: {law_headline(check)}; the phi used here is not a measurement"
        elif diagnostics.get("phi_identified") is False:
            note = f"note: {_identification_verdict(doc)}"
        if form != "paper":
            form_note = f"phi is phi0 of the {form} form (phi at its covariate's centre), not one phi"
            note = f"{note}; {form_note}" if note else f"note: {form_note}"
    if phi is None:
        raise UserError("give --phi or --fit FIT.json")
    from loopscale.fit.analyses import check_equivalence_inputs, equivalence  # SciPy, after the file checks

    check_equivalence_inputs(args.params, args.r, phi, bptt_k)
    out = equivalence(args.params, args.r, phi, template, bptt_k)
    out = dataclasses.replace(out, template=source or "the paper's template (method §2)")
    if args.json:
        print(json.dumps(out.to_dict(), indent=2))
        return 0
    if note:
        print(note)
    p = out.params
    print(
        f"non-looped model: {p:,.0f} parameters at width d = {out.width:.0f}; r = {args.r} at the same "
        f"width, phi = {phi:g} (template: {out.template})"
    )
    print(
        f"worth of {args.r} loops   r^phi = {out.worth:.4f} unique blocks "
        f"({100 * out.worth / args.r:.1f}% of full equivalence)"
    )
    print(f"unique parameters   {out.unique_params:>16,.0f}  ({out.unique_ratio:.4f} x)")
    print(
        f"effective N_eff     {out.effective_params:>16,.0f}  ({out.effective_ratio:.4f} x; "
        f"layers only, injection ignored: {out.effective_ratio_layers_only:.4f} x)"
    )
    trained = "full BPTT" if out.bptt_k is None else f"truncated BPTT, last {out.bptt_k} loops"
    print(
        f"training cost       {out.flops_ratio:.4f} x the non-looped model's FLOPs/token ({trained}) "
        f"(= a {out.cost_equivalent_params:,.0f}-parameter non-looped model; injection "
        f"{100 * out.block_flops_overhead:.1f}% of block FLOPs)"
    )
    return 0


def _identification_verdict(doc: dict) -> str:
    """The verdict of a fit document whose φ is not identified (``present.identification``)."""
    from loopscale.fit.protocol import read_protocol
    from loopscale.fit.results import RecordError
    from loopscale.present.identification import identification_verdict

    try:
        return identification_verdict(read_protocol(doc).diagnostics)
    except (RecordError, KeyError, TypeError, ValueError):  # a partial document: no verdict to give
        return "phi was not identified by that fit"


def run_compare(args: argparse.Namespace) -> int:
    from loopscale.errors import UserError
    from loopscale.io import atomic_write_json

    _check_fit_counts(args, min_bootstrap=2)
    held = _held(args)
    if args.fix_phi is not None:
        raise UserError("--fix phi: compare measures phi in each arm (delta phi is their difference)")
    _check_law_flags(args)
    _check_output_paths(args.json_out, None)
    from loopscale.analysis.comparable import arm_table, check_setups

    (base, base_folder), (variant, variant_folder) = arm_table(args.base), arm_table(args.variant)
    notes = check_setups(base_folder, variant_folder, base, variant)  # incomparable: one line, no fitting
    from loopscale.pairs.case_study import compare_arms  # SciPy, after the checks
    from loopscale.present.compare_text import format_compare
    from loopscale.progress import progress_bar

    restarts = 10 if args.bootstrap_restarts is None else args.bootstrap_restarts
    name = args.name or variant_folder.name
    with progress_bar(2 * args.bootstrap, "compare: bootstraps", "refit") as advance:
        doc = compare_arms(
            base,
            variant,
            name=name,
            form=args.form,
            restarts=args.restarts,
            resamples=args.bootstrap,
            bootstrap_restarts=restarts,
            seed=args.seed,
            noise=args.noise,
            law_check=args.law_check,
            advance=advance,
            held=held,
        )
    if notes:  # an arm's setup could not be read: nothing was checked
        doc = dataclasses.replace(doc, notes=(*doc.notes, "setup_unchecked"))
    print(format_compare(doc))
    if doc.effects is not None:  # the verdict line price ends with, for the same pairs read once
        from loopscale.present.price_text import compare_verdict

        print(compare_verdict(name, doc.effects))
    if args.json_out:
        atomic_write_json(args.json_out, doc.to_dict())
        print(f"wrote {args.json_out}")
    return 0
