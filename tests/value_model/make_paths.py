"""Regenerate ``data/paths.json``: realistic notebook paths with real observations, for value-model tests.

Run once (``python tests/value_model/make_paths.py``); the tests read the stored JSON so they do not need a
sandbox. Each task is a small CSV question; for each we build four kinds of path and give each a Q that a
value model should learn to rank:

- ``answer``:   load, compute, correct ``Formatted answer`` → Q = 0.9
- ``progress``: load, compute (the right number printed)    → Q = 0.4
- ``error``:    load, a cell that raises                     → Q = -0.6
- ``repeat``:   load, then the same cell twice more          → Q = -0.9

The observations are what the real sandbox printed for the real cells, cut by the sandbox to 240 characters
(head and tail kept) so that the paths stay short enough to train on 2 CPU cores in a test.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "paths.json"

VALUES = {"answer": 0.9, "progress": 0.4, "error": -0.6, "repeat": -0.9}


def _datasets(rng: np.random.Generator) -> list[dict]:
    people = pd.DataFrame({"age": rng.integers(18, 80, 40), "income": rng.normal(50000, 12000, 40).round(0),
                           "city": rng.choice(["Oslo", "Lima", "Pune"], 40)})
    sales = pd.DataFrame({"month": np.arange(1, 25), "units": rng.integers(100, 500, 24),
                          "price": rng.uniform(5, 20, 24).round(2)})
    cars = pd.DataFrame({"mpg": rng.normal(25, 5, 30).round(1), "weight": rng.normal(3000, 400, 30).round(0),
                         "cyl": rng.choice([4, 6, 8], 30)})
    return [
        dict(id="people-age", file="people.csv", df=people, question="What is the mean age of the people?",
             compute="print(round(df['age'].mean(), 2))", value=round(people["age"].mean(), 2), name="mean_age",
             bad="print(df['Age'].mean())"),
        dict(id="people-income", file="people.csv", df=people, question="What is the median income?",
             compute="print(df['income'].median())", value=people["income"].median(), name="median_income",
             bad="print(df.income.medain())"),
        dict(id="sales-total", file="sales.csv", df=sales, question="How many units were sold in total?",
             compute="print(int(df['units'].sum()))", value=int(sales["units"].sum()), name="total_units",
             bad="print(df['unit'].sum())"),
        dict(id="sales-revenue", file="sales.csv", df=sales, question="What is the total revenue (units times price)?",
             compute="print(round((df['units'] * df['price']).sum(), 2))",
             value=round(float((sales["units"] * sales["price"]).sum()), 2), name="revenue",
             bad="print(round((df['units'] * df['prices']).sum(), 2))"),
        dict(id="cars-corr", file="cars.csv", df=cars, question="What is the correlation between mpg and weight?",
             compute="print(round(df['mpg'].corr(df['weight']), 4))",
             value=round(float(cars["mpg"].corr(cars["weight"])), 4), name="correlation",
             bad="print(round(df['mpg'].corr(df['weigth']), 4))"),
        dict(id="cars-cyl", file="cars.csv", df=cars, question="How many cars have 8 cylinders?",
             compute="print(int((df['cyl'] == 8).sum()))", value=int((cars["cyl"] == 8).sum()), name="count",
             bad="print(int((df['cylinders'] == 8).sum()))"),
    ]


def main() -> None:
    from sandbox import Sandbox, SandboxConfig

    rng = np.random.default_rng(7)
    records = []
    with tempfile.TemporaryDirectory() as tmp, Sandbox(SandboxConfig(backend="fork")) as sandbox:
        for spec in _datasets(rng):
            data = Path(tmp) / spec["file"]
            spec["df"].to_csv(data, index=False)
            root = sandbox.open_root(input_files=[data])
            load = f"import pandas as pd\ndf = pd.read_csv('{spec['file']}')\nprint(df.shape, list(df.columns))"
            loaded = root.branch()
            load_obs = loaded.run(load).observation(max_chars=240)

            def step(state, thought, code):
                return {"thought": thought, "code": code, "observation": state.run(code).observation(max_chars=240)}

            first = {"thought": "Load the data and look at its shape and columns.", "code": load,
                     "observation": load_obs}
            ok = loaded.branch()
            compute = step(ok, "Compute the requested statistic.", spec["compute"])
            bad = step(loaded.branch(), "Compute the requested statistic.", spec["bad"])
            rep = loaded.branch()
            again = [step(rep, "Load the data and look at its shape and columns.", load) for _ in range(2)]
            answer = {"thought": "The computed value answers the question.",
                      "answer": f"@{spec['name']}[{spec['value']}]"}
            paths = {"answer": [first, compute, answer], "progress": [first, compute], "error": [first, bad],
                     "repeat": [first, *again]}
            task = {"id": spec["id"], "question": spec["question"], "files": [spec["file"]],
                    "format": f"@{spec['name']}[value]", "label": f"@{spec['name']}[{spec['value']}]"}
            for kind, turns in paths.items():
                records.append({"task": task, "kind": kind, "value": VALUES[kind], "turns": turns})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(records)} paths to {OUT}")


if __name__ == "__main__":
    main()
