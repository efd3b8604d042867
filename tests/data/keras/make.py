"""Writes the Keras files beside it with Keras itself (3.15, tensorflow-cpu 2.21): run it from the
project's root with the `tensorflow` extra installed, `python tests/data/keras/make.py`. They are
committed so that the tests that read them (tests/test_without_h5py.py) run with the `test` extra
alone, which installs neither Keras nor h5py; where Keras is installed those tests load them back
with `keras.models.load_model`, as the verdicts they hold the files to say it does."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent


def main() -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    x, y = np.random.rand(8, 4).astype("float32"), np.random.rand(8, 2).astype("float32")
    (HERE / "best").mkdir(parents=True, exist_ok=True)
    best = keras.callbacks.ModelCheckpoint(str(HERE / "best" / "best.keras"), save_best_only=True, monitor="loss")
    model.fit(x, y, epochs=1, batch_size=8, callbacks=[best], verbose=0)
    (HERE / "lambda").mkdir(exist_ok=True)
    lam = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(lambda t: t * 2), keras.layers.Dense(2)])
    lam.save(HERE / "lambda" / "ep01.keras")
    lam.save(HERE / "lambda" / "legacy-01.h5")


if __name__ == "__main__":
    main()
