"""``loopscale price [RECIPE] [--set KEY=VALUE …] [--variant FILE] [--plugin MODULE:ATTR] --reuse BASE``: a
recipe's (``loopscale.recipes``) effect on looped models from seed-matched pairs, trained in batches against
a published base and re-read after each, with a stopping rule whose boundary holds α over all the looks;
``--dry-run`` says what the plan can decide before it spends (``loopscale.analysis.price``; docs/fitting.md
"Pricing a recipe")."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopscale.recipes import PRESETS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "price",
        help="price a recipe against a published base from seed-matched pairs, stopping once decided",
    )
    p.add_argument(
        "recipe", nargs="?",
        help=f"a preset ({', '.join(sorted(PRESETS))}) or an installed plugin (entry points "
        "loopscale.recipes)",
    )  # fmt: skip
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="change one key of the runs' config (model.injection=parcae, optim.matrix_lr=0.02, "
        "bptt=ceil_half); repeat for more",
    )  # fmt: skip
    p.add_argument(
        "--variant", type=Path, help="a YAML file of changes (model:, train:, bptt: as in a sweep group)"
    )
    p.add_argument("--plugin", metavar="MODULE:ATTR", help="a recipe plugin (loopscale.plugins.RecipePlugin)")
    p.add_argument("--name", help="the recipe's name (required with --set or --variant; default its own)")
    p.add_argument("--reuse", type=Path, required=True, help="the published base sweep folder")
    p.add_argument(
        "--out", type=Path, help="the variant's sweep and report folder (default runs/price-RECIPE)"
    )
    p.add_argument("--target", type=float, help="stop once delta phi's half-width is this small")
    p.add_argument("--max-hours", type=float, default=1.0, help="wall hours of training at most (1)")
    p.add_argument("--batch", type=int, default=2, help="pairs trained between looks after the first 4 (2)")
    p.add_argument("--workers", type=int, default=2, help="single-thread training workers (2)")
    p.add_argument(
        "--alpha", type=float, default=0.04, help="the chance of naming a wrong effect over all looks (0.04)"
    )
    p.add_argument("--bootstrap", type=int, default=200, help="base-law bootstrap draws per look (200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", type=Path, default=Path("data"), help="where the default corpus is built")
    p.add_argument("--render", action="store_true", help="only re-render --out's report from its price.json")
    p.add_argument(
        "--boundary", choices=("obf", "pocock"), default="obf",
        help="the looks' boundary: O'Brien-Fleming-like (strict early, near the one-look test last) or "
        "Pocock-like (constant) (obf)",
    )  # fmt: skip
    p.add_argument(
        "--sequences", type=int, default=1000, help="simulated sequences per truth for the boundary and power"
    )
    p.add_argument(
        "--dry-run", action="store_true",
        help="train nothing: print the plan's looks, boundary and power, and the hours 80%% power needs",
    )  # fmt: skip
    p.add_argument(
        "--plan", choices=("separate", "delta_phi"), default="delta_phi",
        help="which cells first: the power to name each term (every model, offset, delta phi beyond an "
        "offset, width slope) per hour (separate), or delta phi's SE beyond an offset alone (delta_phi, "
        "the plan of every published price; default); a price begun on delta_phi and resumed with separate "
        "keeps its pairs first and continues from them; one begun separating stays so",
    )  # fmt: skip
    p.add_argument(
        "--extend", type=Path, metavar="SPEC",
        help="with --dry-run: let the plan add base runs the base lacks (widths 16, 96, 128 and budget 2e13 "
        "beside the base's) and write the sweep spec of those it picks here, to train once with "
        "`loopscale sweep SPEC --out EXT_DIR` (never into the base)",
    )  # fmt: skip
    p.add_argument(
        "--trainer",
        metavar="CMD",
        help="train the variant runs with this command through the run contract (docs/contract.md)",
    )
    p.add_argument(
        "--against", type=Path, metavar="ARM",
        help="read --out's priced pairs against another arm priced against the same base on the same plan "
        "(its runs at the same cells and seeds) instead of against the base, whose law stays; trains "
        "nothing, writes OUT/against-ARM/",
    )  # fmt: skip
    p.set_defaults(func=cmd_price)

    p = sub.add_parser(
        "eval-depth",
        help="a priced arm's pairs at test-time loop counts {1, r/2, r, 2r}: val loss, both arms",
    )
    p.add_argument("arm", type=Path, help="a folder written by `loopscale price`")
    p.add_argument(
        "--weights-from",
        type=Path,
        help="where the base's runs were retrained (one folder per run name): published runs keep no weights",
    )
    p.add_argument(
        "--retrain", action="store_true", help="retrain base runs without weights into --weights-from"
    )
    p.add_argument("--force", action="store_true", help="evaluate again where a run's test_time.json exists")
    p.set_defaults(func=cmd_eval_depth)


def cmd_price(args: argparse.Namespace) -> int:
    from loopscale.analysis.price import PriceSettings, price
    from loopscale.cli import require_input
    from loopscale.errors import UserError
    from loopscale.recipes import resolve_recipe

    recipe = None
    if not args.render:
        recipe = resolve_recipe(
            args.recipe, sets=args.set, variant=args.variant, plugin=args.plugin, label=args.name
        )
    elif args.out is None and (args.name or args.recipe) is None:
        raise UserError("--render needs the price folder: give --out (or the recipe's name)")
    out = args.out or Path("runs") / f"price-{recipe.name if recipe else args.name or args.recipe}"
    settings = PriceSettings(
        recipe=recipe,
        base=args.reuse,
        out=out,
        target=args.target,
        max_hours=args.max_hours,
        batch=args.batch,
        workers=args.workers,
        alpha=args.alpha,
        bootstrap=args.bootstrap,
        seed=args.seed,
        data_root=args.data_root,
        boundary=args.boundary,
        sequences=args.sequences,
        trainer=args.trainer,
        plan=args.plan,
        against=args.against,
    )
    if args.against is not None:
        clash = [flag for flag, on in (("--dry-run", args.dry_run), ("--render", args.render),
                                       ("--extend", args.extend), ("--trainer", args.trainer))
                 if on]  # fmt: skip
        if clash:
            raise UserError(f"--against reads two priced arms and trains nothing: drop {', '.join(clash)}")
        if args.out is None:
            raise UserError("--against needs --out: the priced arm whose pairs are read against ARM")
        for folder, flag in ((args.out, "--out"), (args.against, "--against"), (args.reuse, "--reuse")):
            require_input(folder, f"{flag} folder", folder=True)
        from loopscale.analysis.price_against import price_against

        price_against(settings)
        return 0
    if args.dry_run:  # reads the base only: writes nothing anywhere
        from loopscale.analysis.price import dry_run
        from loopscale.present.price_text import dry_run_lines

        if args.render:
            raise UserError("--dry-run and --render exclude each other: --render re-renders a finished price")
        settings.validate()
        require_input(args.reuse, "--reuse base sweep", folder=True)
        if args.extend is not None:
            _check_extend(args.extend, args.reuse, settings.plan)
        looks, power, cells = dry_run(settings, extend=args.extend is not None)
        print("\n".join(dry_run_lines(recipe.name, args.reuse, args.workers, looks, power)))
        if args.extend is not None:
            _write_extension(args.extend, args.reuse, cells, args.workers)
        return 0
    if args.extend is not None:
        raise UserError("--extend plans a base extension: give it with --dry-run, then train its spec")
    if not args.render:  # a folder loopscale did not create is refused before anything else is read
        from loopscale.io import check_output

        check_output(out, "--out", folder=True, kind="sweep")
        check_output(args.data_root, "--data-root", folder=True, kind="data")
    require_input(args.reuse, "--reuse base sweep", folder=True)
    if args.render:
        from loopscale.analysis.price import read_price, read_test_time
        from loopscale.report.price import write_price_report

        require_input(out / "price.json", "price.json in --out (run `loopscale price` first)", folder=False)
        print(write_price_report(read_price(out / "price.json"), out, read_test_time(out)))
        return 0
    price(settings)
    return 0


def _check_extend(path: Path, base: Path, plan: str) -> None:
    """Refuse an extension spec path inside the base (the base is the user's: never written), one that
    exists (never overwritten) or a plan that cannot use it, before the plan is fitted."""
    from loopscale.errors import UserError
    from loopscale.io import check_output

    if plan != "separate":
        raise UserError("--extend needs --plan separate: the delta_phi plan ranks the base's own cells only")
    if path.resolve().is_relative_to(base.resolve()):
        raise UserError(f"--extend {path}: is inside the base {base}; write the extension's spec elsewhere")
    if path.exists():
        raise UserError(f"--extend {path}: exists; give a new file (an extension spec is never overwritten)")
    check_output(path, "--extend", folder=False)


def _write_extension(path: Path, base: Path, cells, workers: int = 2) -> None:
    """The extension's base runs as a sweep spec with the base's template, at ``path``: the plan's ``cells``
    ((budget FLOPs, width, r)) and the r = 1 run at each of their (budget, width), the law's plain anchor
    there (the published law is checked at it, and a recipe that changes plain models pairs with it)."""
    from loopscale.config import dump_yaml, load_yaml, to_dict
    from loopscale.design.separate import extension_seconds, extension_sweep
    from loopscale.io import atomic_write_text
    from loopscale.sweep.plan import plan_sweep
    from loopscale.sweep.results import read_results

    if not cells:
        print(f"the plan picks no extension cell within the hour cap: {path} is not written")
        return
    anchors = {(b, w, 1) for b, w, _ in cells}
    spec = extension_sweep(load_yaml(base / "sweep.yaml"), sorted({*cells, *anchors}), f"{base.name}-ext")
    runs = plan_sweep(spec)
    hours = float(extension_seconds(read_results(base / "results.csv"), runs).sum()) / workers / 3600
    atomic_write_text(path, dump_yaml(to_dict(spec)))
    print(
        f"wrote {path}: {len(runs)} base runs ({len(cells)} the plan pairs at, the rest r = 1 anchors), "
        f"≈ {hours:.2f} h on {workers} workers by the base's measured cost; train them once with "
        f"`loopscale sweep {path} --out {base.parent / (base.name + '-ext')} --workers {workers}`"
    )


def cmd_eval_depth(args: argparse.Namespace) -> int:
    from loopscale.analysis.test_time import DepthEvalSettings, eval_depth
    from loopscale.cli import require_input
    from loopscale.present.test_time import depth_lines

    require_input(args.arm, "ARM price folder", folder=True)
    if args.weights_from is not None and not args.retrain:
        require_input(args.weights_from, "--weights-from folder", folder=True)
    depth = eval_depth(DepthEvalSettings(args.arm, args.weights_from, args.retrain, args.force))
    print("\n".join(depth_lines(depth)))
    return 0
