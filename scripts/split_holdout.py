#!/usr/bin/env python3
"""Split DSSTNE text into a training part and a held-out part, per sample.

For every line ``NAME<TAB>feat:feat...``, a seeded random fraction of the features goes to the
held-out file and the rest to the training file (samples with fewer than 2 features keep them
all). Train on the first, `predict` with it as the filter, and `evaluate` against the second.

Example:
  python scripts/split_holdout.py ratings.txt --train train.txt --heldout heldout.txt --fraction 0.2
"""

from __future__ import annotations

import click
import numpy as np


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("text", type=click.Path(exists=True, dir_okay=False))
@click.option("--train", "train_path", required=True, help="Training part to write.")
@click.option("--heldout", "heldout_path", required=True, help="Held-out part to write.")
@click.option("--fraction", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.2,
              show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
def main(text, train_path, heldout_path, fraction, seed):
    """Hold out a fraction of each sample's features."""
    rng = np.random.default_rng(seed)
    kept = held = 0
    with open(text, encoding="utf-8") as src, \
            open(train_path, "w", encoding="utf-8", newline="\n") as train, \
            open(heldout_path, "w", encoding="utf-8", newline="\n") as out:
        for line in src:
            name, _, rest = line.rstrip("\n").partition("\t")
            tokens = rest.split(":") if rest else []
            n_out = int(round(len(tokens) * fraction)) if len(tokens) >= 2 else 0
            chosen = set(rng.choice(len(tokens), size=n_out, replace=False).tolist())
            train.write(name + "\t" + ":".join(t for i, t in enumerate(tokens) if i not in chosen)
                        + "\n")
            if chosen:
                out.write(name + "\t" + ":".join(t for i, t in enumerate(tokens) if i in chosen)
                          + "\n")
            kept += len(tokens) - n_out
            held += n_out
    click.echo(f"split_holdout: {kept:,} features to {train_path}, {held:,} to {heldout_path}",
               err=True)


if __name__ == "__main__":
    main()
