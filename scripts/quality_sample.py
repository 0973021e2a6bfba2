#!/usr/bin/env python3
"""Held-out quality of training recipes on a ratings file, against popularity.

Converts the ratings to DSSTNE text, holds out a fraction of each user's items, builds the
input/output datasets from the rest with generate-netcdf, trains each recipe with the
network definition given, and prints precision/recall/NDCG/MAP@k next to a popularity ranking.

Example:
  python scripts/quality_sample.py --recipe default --recipe "sgd" --epochs 10 --batch 256

TF32's effect on a model without a GPU: the reference backend models the GPU's TF32
products (each operand's mantissa cut to 10 bits), so the same recipes compare exactly:
  python scripts/quality_sample.py --backend reference --products float32 --products tf32 \
      --recipe "default seed=1" --recipe "default seed=2"
"""

from __future__ import annotations

# Before the imports below (up to a second, numba): Ctrl-C's default action while they load,
# as the installed commands have it. Only when run: tests load the scripts as modules.
if __name__ == "__main__":
    from destiny.cli.entry import default_ctrl_c_while_loading

    default_ctrl_c_while_loading()

import dataclasses  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import click  # noqa: E402

from destiny.cli.common import library_errors, run_program  # noqa: E402
from destiny.cli.options import SEED, path_given  # noqa: E402
from destiny.errors import InterruptedAfterOutputs  # noqa: E402
from destiny.holdout import evaluate_recipe, prepare_split, recipe_value  # noqa: E402
from destiny.io.atomic import check_outputs, is_stream, text_output  # noqa: E402
from destiny.netdef import load_netdef  # noqa: E402
from destiny.train import OPTIMIZER_DEFAULTS, TrainConfig  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (the defaults' checkout)
_POSITIVE = click.IntRange(min=1)


def _check_recipes(ctx, param, recipes):
    """Each recipe as evaluate_recipe reads it, refused before the work (which takes hours)
    rather than as a traceback once the recipes before it are trained."""
    for recipe in recipes:
        if (problem := _recipe_problem(recipe)) is not None:
            raise click.BadParameter(f"{recipe!r}: {problem}. A recipe is 'default' or an "
                                     f"optimizer ({', '.join(OPTIMIZER_DEFAULTS)}), then "
                                     "key=value overrides, e.g. 'adam alpha=0.003'.",
                                     ctx, param)
    return recipes


def _recipe_problem(recipe: str) -> str | None:
    settings = {f.name: str(f.type) for f in dataclasses.fields(TrainConfig)
                if f.name != "optimizer"}
    words = recipe.split()
    if words and words[0] != "default" and words[0] not in OPTIMIZER_DEFAULTS:
        return f"{words[0]!r} is not an optimizer"
    for word in words[1:]:
        key, eq, text = word.partition("=")
        if not eq or key not in settings:
            return f"{word!r} is not key=value with a key of {', '.join(settings)}"
        kind = settings[key]
        expected = ("true or false" if "bool" in kind else "an integer" if kind == "int"
                    else "a finite number")
        try:
            value = recipe_value(text)
        except ValueError:
            return f"{word!r}: {text!r} is not {expected}"
        if (isinstance(value, bool) != ("bool" in kind) or kind == "int" and type(value) is not int
                or isinstance(value, float) and not math.isfinite(value)):
            return f"{word!r}: {text!r} is not {expected}"
        least = 0 if key == "seed" else 1
        if kind == "int" and not least <= value <= SEED.max:
            return f"{word!r} is out of range: {key} is from {least} to {SEED.max}"
    return None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--ratings", default=os.path.join(ROOT, "data", "ratings.csv"),
              show_default="data/ratings.csv beside scripts/")
@click.option("--config", default=os.path.join(ROOT, "netdefs", "movielens.json"),
              show_default="netdefs/movielens.json beside scripts/")
@click.option("--recipe", "recipes", multiple=True, default=["default"], show_default=True,
              callback=_check_recipes,
              help="'default', or an optimizer name with optional key=value overrides, "
                   "e.g. 'adam alpha=0.003'.")
@click.option("--epochs", type=_POSITIVE, default=10, show_default=True)
@click.option("--batch", type=_POSITIVE, default=256, show_default=True)
@click.option("--k", type=_POSITIVE, default=10, show_default=True)
@click.option("--seed", type=SEED, default=1, show_default=True, help="Seed of the split.")
@click.option("--backend", type=click.Choice(["cpu", "gpu", "reference"]), default="cpu",
              show_default=True)
@click.option("--products", multiple=True, type=click.Choice(["float32", "tf32"]),
              default=["float32"], show_default=True,
              help="Train and score every recipe with each: tf32 as --tf32 (on the gpu, or "
                   "modelled on the reference backend; the cpu has no TF32).")
@click.option("--json", "json_path", default=None, callback=path_given)
@library_errors
def main(ratings, config, recipes, epochs, batch, k, seed, backend, products, json_path):
    """Compare training recipes with popularity on held-out items."""
    if "tf32" in products and backend == "cpu":  # (its rows would be float32's, so labelled)
        raise click.UsageError("--products tf32 has no effect on the cpu backend, whose "
                               "products are float32: use --backend reference, which models "
                               "TF32's products, or --backend gpu.")
    # Before the work, which takes hours: a mistyped directory fails now, not at the end, and
    # so does a definition that cannot be read or is not one (its N 'auto' resolved later).
    load_netdef(config, flag="--config")
    if json_path and not is_stream(json_path):  # (stdout, a pipe: written in place)
        check_outputs([(json_path, "metrics file (--json)")],
                      inputs=[(ratings, "ratings file (--ratings)"),
                              (config, "network definition (--config)")])
    try:
        with tempfile.TemporaryDirectory() as work:
            split = prepare_split(ratings, work, fraction=0.2, seed=seed)
            rows = [("popularity", split.popularity(k))]
            for recipe in recipes:
                for arithmetic in products:
                    started = time.perf_counter()
                    metrics = evaluate_recipe(split, config, recipe, epochs=epochs, batch=batch,
                                              k=k, backend=backend, tf32=arithmetic == "tf32")
                    name = recipe if products == ("float32",) else f"{recipe} [{arithmetic}]"
                    rows.append((f"{name} ({time.perf_counter() - started:.0f} s)", metrics))
    except InterruptedAfterOutputs:
        # Its outputs were in the work directory, now removed: the message that calls them
        # complete would name files that no longer exist. An interrupt is all it was.
        raise KeyboardInterrupt from None
    out = io.StringIO()
    w = max(40, *(len(name) for name, _ in rows))
    out.write(f"{'recipe':<{w}} {'P@k':>7} {'R@k':>7} {'NDCG@k':>7} {'MAP@k':>7}   (k={k})\n")
    for name, m in rows:
        out.write(f"{name:<{w}} {m.precision:7.4f} {m.recall:7.4f} {m.ndcg:7.4f} {m.map:7.4f}\n")
    print(out.getvalue(), end="")
    if json_path:
        with text_output(json_path) as f:  # (as every output: whole or not at all)
            json.dump({name: m.as_dict() for name, m in rows}, f, indent=2)


if __name__ == "__main__":
    run_program(main, "quality_sample.py")
