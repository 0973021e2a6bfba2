"""The default recipe learns more than popularity on the bundled sample (held-out items).

DSSTNE's MovieLens command (netdefs/movielens.json, batch 256, 10 epochs) with Destiny's
defaults, on data/ratings.csv with 20% of each user's items held out. Measured when the
defaults were chosen: recall@10 0.356 for the default recipe against 0.207 for popularity
(1.7x); DSSTNE's plain SGD (alpha 0.025) gets 0.207, no better than popularity.
"""

from __future__ import annotations

import pathlib

import pytest

from destiny.holdout import evaluate_recipe, prepare_split

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARGIN = 1.4  # the default recipe must beat popularity's recall@10 by at least 40%


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    return prepare_split(ROOT / "data" / "ratings.csv", tmp_path_factory.mktemp("quality"),
                         fraction=0.2, seed=1)


def test_default_recipe_beats_popularity(split):
    popularity = split.popularity(10)
    model = evaluate_recipe(split, ROOT / "netdefs" / "movielens.json", "default", epochs=10,
                            batch=256, k=10)
    assert model.users == popularity.users > 1990  # users with at least one held-out item
    assert model.recall > MARGIN * popularity.recall, (model, popularity)
    assert model.ndcg > popularity.ndcg
