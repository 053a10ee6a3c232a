"""DABench questions with scripted solutions for the replay policy (shared by the search tests)."""

from __future__ import annotations

#: DABench dev ids used here, with a correct computation, another correct one, a wrong one, and a wrong answer
SOLUTIONS = {
    0: dict(file="test_ave.csv",
            right=("round(df['Fare'].mean(), 2)", "round(df['Fare'].sum() / len(df), 2)"),
            wrong="round(df['Fare'].median(), 2)", answer="@mean_fare[34.65]", bad="@mean_fare[15.74]",
            guess="@mean_fare[30.00]"),
    5: dict(file="test_ave.csv",
            right=("round((df['SibSp'] + df['Parch']).corr(df['Fare']), 2)",
                   "round(__import__('scipy.stats').stats.pearsonr(df['SibSp'] + df['Parch'], df['Fare'])[0], 2)"),
            wrong="round((df['SibSp'] + df['Parch']).corr(df['Fare'], method='spearman'), 2)",
            answer="@correlation_coefficient[0.21]", bad="@correlation_coefficient[0.53]",
            guess="@correlation_coefficient[0.5]"),
    9: dict(file="GODREJIND.csv",
            right=("round(df['Close Price'].mean(), 2)", "round(df['Close Price'].sum() / len(df), 2)"),
            wrong="round(df['Open Price'].mean(), 2)", answer="@mean_close_price[570.68]",
            bad="@mean_close_price[1.00]", guess="@mean_close_price[500]"),
}


def step(thought: str, code: str) -> str:
    return f"Thought: {thought}\nAction:\n```python\n{code}\n```\n"


def final(answer: str) -> str:
    return f"Thought: The output gives the answer.\nFormatted answer: {answer}"


def replay_rules(qid: int) -> list[dict]:
    """A scripted policy for one DABench question: a correct path (two ways), a wrong computation, a guessed
    wrong answer, and a branch that keeps raising NameError."""
    s = SOLUTIONS[qid]
    load = step("Load the data.",
                f"import pandas as pd\ndf = pd.read_csv('{s['file']}')\nprint('LOADED-{qid}', df.shape)")
    broken = step("Use the frame.", f"print(missing_{qid}.head())")
    return [
        {"match": f"LOADED-{qid}",
         "replies": [step("Compute it.", f"print('RESULT-{qid}', {s['right'][0]})"),
                     step("Compute it another way.", f"print('RESULT-{qid}', {s['right'][1]})"),
                     step("Compute something else.", f"print('WRONG-{qid}', {s['wrong']})")],
         "logprobs": [-0.3, -0.5, -0.4]},
        {"match": f"RESULT-{qid}", "replies": [final(s["answer"])]},
        {"match": f"WRONG-{qid}", "replies": [final(s["bad"])]},
        {"match": f"missing_{qid}", "replies": [broken]},
        {"match": f"DABENCH-{qid}", "replies": [load, final(s["guess"]).replace("The output gives", "I guess"), broken],
         "logprobs": [-0.2, -1.0, -0.6]},
    ]
