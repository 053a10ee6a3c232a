"""Question programs: one function per kind of data-analysis question, over any table.

Each program looks at a table's columns, picks the ones its question needs (or declines with ``None``), and
writes a task the way NbQA and InfiAgent-DABench write theirs — a question naming the columns, constraints
that fix the method, and an ``@name[value]`` answer format — together with a multi-step notebook solution:
load and inspect, compute, print each answer as ``name: value``. The values are NOT computed here: the
solution runs in the sandbox and the label is read from its real output (``nbqa_pipeline.synth.execute``).

Every program has several phrasings (chosen by the task's random generator) so that a model fine-tuned on
the data learns the task, not one sentence. The concept names and levels are DABench's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from nbqa_pipeline.synth.tables import TableInfo

__all__ = ["Step", "Draft", "Program", "PROGRAMS", "CONCEPTS", "inspect_step"]

CONCEPTS = (
    "Summary Statistics",
    "Distribution Analysis",
    "Correlation Analysis",
    "Outlier Detection",
    "Comprehensive Data Preprocessing",
    "Feature Engineering",
    "Machine Learning",
)


@dataclass(frozen=True)
class Step:
    """One notebook step: the model's thought and its code cell."""

    thought: str
    code: str


@dataclass(frozen=True)
class Draft:
    """A task and its solution before execution.

    ``answers``: the answer names, in order; the last step prints each as ``name: value``.
    ``final_thought``: the last turn's thought, with ``{name}`` placeholders filled from the real output.
    ``column``: a column the solution names, for the wrong-column-name error variant (None: no variant).
    ``creates``: a column the solution adds to the table, for the used-before-created error variant.
    """

    program: str
    concepts: tuple[str, ...]
    level: str
    question: str
    constraints: str
    format: str
    steps: tuple[Step, ...]
    answers: tuple[str, ...]
    final_thought: str
    column: str | None = None
    creates: str | None = None


Program = Callable[[TableInfo, random.Random], "Draft | None"]


def _c(name: str) -> str:
    """A column name as a Python string literal."""
    return repr(name)


def inspect_step(table: TableInfo, rng: random.Random) -> Step:
    """The first step of every solution: load the file and look at it (several realistic variants)."""
    load = f"import pandas as pd\n\ndf = pd.read_csv({table.file_name!r})\n"
    variants = (
        Step("Load the data and look at its first rows and columns.", load + "print(df.shape)\nprint(df.head())"),
        Step("First I load the file and check the column names and types.", load + "print(df.dtypes)"),
        Step("Let me read the CSV file and inspect its structure.", load + "df.info()"),
        Step("I will load the dataset and list its columns.", load + "print(df.columns.tolist())\nprint(len(df))"),
    )
    return rng.choice(variants)


def _decimals(rng: random.Random) -> int:
    return rng.choice((2, 2, 2, 3, 4))


def _dec_words(d: int) -> str:
    return {2: "two", 3: "three", 4: "four"}[d]


def _snake(name: str) -> str:
    out = "".join(ch.lower() if ch.isalnum() else "_" for ch in name).strip("_")
    while "__" in out:
        out = out.replace("__", "_")
    return out or "value"


# --------------------------------------------------------------------------------------- summary statistics


def mean_of_column(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    stat, fn, noun = rng.choice((("mean", "mean()", "average"), ("median", "median()", "median"),
                                 ("std", "std()", "standard deviation"), ("max", "max()", "maximum"),
                                 ("min", "min()", "minimum")))
    d = _decimals(rng)
    name = f"{stat}_{_snake(col)}"
    question = rng.choice((
        f"What is the {noun} of the \"{col}\" column?",
        f"Calculate the {noun} of {col} in the dataset.",
        f"Compute the {noun} value of the column '{col}'.",
        f"Find the {noun} of \"{col}\" across all rows.",
    ))
    extra = " Use the sample standard deviation (pandas default, ddof=1)." if stat == "std" else ""
    constraints = (f"Ignore missing values. Use pandas to compute the {noun}.{extra} "
                   f"Round the result to {_dec_words(d)} decimal places.")
    fmt = f"@{name}[value] where \"value\" is a number rounded to {_dec_words(d)} decimal places."
    code = f"value = df[{_c(col)}].{fn}\nprint('{name}:', round(value, {d}))"
    thought = rng.choice((f"Now compute the {noun} of '{col}' and round it to {d} decimals.",
                          f"The column '{col}' is numeric, so I can take its {noun} directly.",
                          f"Compute the {noun} of {col}, skipping missing values."))
    return Draft("mean_of_column", ("Summary Statistics",), "easy", question, constraints, fmt,
                 (Step(thought, code),), (name,), f"The {noun} of {col} is {{{name}}}.", col)


def count_categories(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.categorical:
        return None
    col = rng.choice(t.categorical)
    kind = rng.choice(("unique", "mode"))
    if kind == "unique":
        name = f"unique_{_snake(col)}"
        question = rng.choice((f"How many unique values does the \"{col}\" column have?",
                               f"Count the number of distinct categories in {col}."))
        constraints = "Count distinct non-missing values only."
        fmt = f"@{name}[count] where \"count\" is an integer."
        code = f"count = df[{_c(col)}].nunique()\nprint('{name}:', count)"
        thought = f"Count the distinct non-missing values of '{col}' with nunique()."
        final = f"{col} has {{{name}}} distinct values."
        names: tuple[str, ...] = (name,)
    else:
        name = f"most_common_{_snake(col)}"
        question = rng.choice((f"What is the most frequent value in the \"{col}\" column?",
                               f"Which category of {col} appears most often, and how many times?"))
        constraints = "Use value_counts() and take the first (most frequent) value; ignore missing values."
        fmt = (f"@{name}[value] @{name}_count[count] where \"value\" is the category as it appears in the data "
               "and \"count\" is an integer.")
        code = (f"counts = df[{_c(col)}].value_counts()\nprint(counts.head())\n"
                f"print('{name}:', counts.index[0])\nprint('{name}_count:', counts.iloc[0])")
        thought = f"Count how often each value of '{col}' occurs and take the most frequent one."
        final = f"The most common value of {col} is {{{name}}}, seen {{{name}_count}} times."
        names = (name, f"{name}_count")
    return Draft("count_categories", ("Summary Statistics",), "easy", question, constraints, fmt,
                 (Step(thought, code),), names, final, col)


def group_mean(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous or not t.categorical:
        return None
    cat, num = rng.choice(t.categorical), rng.choice(t.continuous)
    d = _decimals(rng)
    high = rng.random() < 0.7
    word = "highest" if high else "lowest"
    name = f"{word}_group"
    question = rng.choice((
        f"Which \"{cat}\" group has the {word} average \"{num}\"? What is that average?",
        f"Group the data by {cat} and find the group with the {word} mean {num}.",
        f"For each value of '{cat}', compute the mean of '{num}'. Report the group with the {word} mean.",
    ))
    constraints = (f"Group by '{cat}' and compute the mean of '{num}' for each group, ignoring missing values. "
                   f"Round the mean to {_dec_words(d)} decimal places.")
    fmt = (f"@{name}[group] @{word}_mean[mean] where \"group\" is the value of {cat} and \"mean\" is rounded to "
           f"{_dec_words(d)} decimal places.")
    pick = "idxmax" if high else "idxmin"
    code = (f"means = df.groupby({_c(cat)})[{_c(num)}].mean()\nprint(means)\n"
            f"group = means.{pick}()\nprint('{name}:', group)\nprint('{word}_mean:', round(means[group], {d}))")
    thought = f"Group by '{cat}', average '{num}' in each group, then take the group with the {word} mean."
    final = f"The {cat} group with the {word} mean {num} is {{{name}}} ({{{word}_mean}})."
    return Draft("group_mean", ("Summary Statistics", "Comprehensive Data Preprocessing"), "medium", question,
                 constraints, fmt, (Step(thought, code),), (name, f"{word}_mean"), final, num)


def conditional_mean(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 2:
        return None
    a, b = rng.sample(list(t.continuous), 2)
    d = _decimals(rng)
    name = f"mean_{_snake(a)}"
    question = rng.choice((
        f"What is the mean of \"{a}\" for the rows where \"{b}\" is above its median?",
        f"Among observations whose {b} is greater than the median {b}, calculate the average {a}.",
    ))
    constraints = (f"Compute the median of '{b}' over all rows (ignoring missing values), keep the rows with '{b}' "
                   f"strictly greater than it, and take the mean of '{a}' over those rows. Round to "
                   f"{_dec_words(d)} decimal places.")
    fmt = (f"@{name}[value] @rows_selected[count] where \"value\" is rounded to {_dec_words(d)} decimal places and "
           "\"count\" is the number of rows kept.")
    s1 = Step(f"Find the median of '{b}' first.", f"median_b = df[{_c(b)}].median()\nprint(median_b)")
    s2 = Step(f"Keep the rows with {b} above the median and average {a} over them.",
              f"subset = df[df[{_c(b)}] > median_b]\nprint('{name}:', round(subset[{_c(a)}].mean(), {d}))\n"
              f"print('rows_selected:', len(subset))")
    return Draft("conditional_mean", ("Summary Statistics", "Comprehensive Data Preprocessing"), "medium", question,
                 constraints, fmt, (s1, s2), (name, "rows_selected"),
                 f"Over the {{rows_selected}} rows with {b} above its median, the mean {a} is {{{name}}}.", b)


# ------------------------------------------------------------------------------------- distribution analysis


def skew_kurtosis(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    d = _decimals(rng)
    question = rng.choice((
        f"Calculate the skewness and kurtosis of the \"{col}\" column.",
        f"What are the skewness and the kurtosis of {col}? Is the distribution skewed to the right or left?",
        f"Describe the shape of the distribution of '{col}' with its skewness and kurtosis.",
    ))
    constraints = (f"Use pandas' skew() and kurt() (sample skewness, Fisher's excess kurtosis) on '{col}' after "
                   f"dropping missing values. Round both to {_dec_words(d)} decimal places. The distribution is "
                   "'right' skewed if skewness > 0, else 'left'.")
    fmt = (f"@skewness[skew] @kurtosis[kurt] @skew_direction[direction] where \"skew\" and \"kurt\" are rounded to "
           f"{_dec_words(d)} decimal places and \"direction\" is right or left.")
    code = (f"values = df[{_c(col)}].dropna()\nskewness = values.skew()\nkurtosis = values.kurt()\n"
            f"print('skewness:', round(skewness, {d}))\nprint('kurtosis:', round(kurtosis, {d}))\n"
            "print('skew_direction:', 'right' if skewness > 0 else 'left')")
    return Draft("skew_kurtosis", ("Distribution Analysis",), "medium", question, constraints, fmt,
                 (Step(f"Drop the missing values of '{col}' and compute skewness and kurtosis with pandas.", code),),
                 ("skewness", "kurtosis", "skew_direction"),
                 f"{col} has skewness {{skewness}} and kurtosis {{kurtosis}}, so it is {{skew_direction}}-skewed.",
                 col)


def normality_test(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    question = rng.choice((
        f"Is the \"{col}\" column normally distributed? Use the Shapiro-Wilk test.",
        f"Test whether {col} follows a normal distribution.",
    ))
    constraints = (f"Apply scipy.stats.shapiro to '{col}' after dropping missing values. Use a significance level "
                   "of 0.05: if the p-value is below it, the data is not normal. Round the p-value to four "
                   "decimal places.")
    fmt = "@p_value[p] @is_normal[answer] where \"p\" is rounded to four decimal places and \"answer\" is yes or no."
    code = (f"from scipy import stats\n\nvalues = df[{_c(col)}].dropna()\nstatistic, p = stats.shapiro(values)\n"
            "print('p_value:', round(p, 4))\nprint('is_normal:', 'yes' if p >= 0.05 else 'no')")
    return Draft("normality_test", ("Distribution Analysis",), "medium", question, constraints, fmt,
                 (Step(f"Run the Shapiro-Wilk test on '{col}' without its missing values.", code),),
                 ("p_value", "is_normal"), "The Shapiro-Wilk p-value is {p_value}, so normal: {is_normal}.", col)


def share_above(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    ref = rng.choice(("mean", "median"))
    question = rng.choice((
        f"What percentage of the rows have a \"{col}\" value above the {ref}?",
        f"Calculate the proportion of observations whose {col} exceeds the {ref} {col}, as a percentage.",
    ))
    constraints = (f"Compute the {ref} of '{col}' ignoring missing values; count the rows with '{col}' strictly above "
                   "it and divide by the number of non-missing values. Report a percentage rounded to two decimals.")
    fmt = "@percentage_above[pct] where \"pct\" is a number between 0 and 100 rounded to two decimal places."
    code = (f"values = df[{_c(col)}].dropna()\nthreshold = values.{ref}()\nprint('threshold:', threshold)\n"
            "pct = (values > threshold).mean() * 100\nprint('percentage_above:', round(pct, 2))")
    return Draft("share_above", ("Distribution Analysis", "Summary Statistics"), "easy", question, constraints,
                 fmt, (Step(f"Compare each {col} value with the {ref} and take the share above it.", code),),
                 ("percentage_above",), f"{{percentage_above}} % of the {col} values lie above the {ref}.", col)


# --------------------------------------------------------------------------------------- correlation analysis


def pearson(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 2:
        return None
    a, b = rng.sample(list(t.continuous), 2)
    method = rng.choice(("pearson", "pearson", "spearman"))
    label = "Pearson correlation coefficient (r)" if method == "pearson" else "Spearman rank correlation"
    d = _decimals(rng)
    question = rng.choice((
        f"Is there a correlation between \"{a}\" and \"{b}\"? Calculate the {label}.",
        f"Calculate the {label} between {a} and {b}.",
        f"How strongly are '{a}' and '{b}' related? Report their {method.title()} correlation.",
    ))
    constraints = (f"Use the {method.title()} method on the rows where both columns are present. Round the "
                   f"coefficient to {_dec_words(d)} decimal places.")
    fmt = (f"@correlation_coefficient[r] where \"r\" is a number between -1 and 1, rounded to {_dec_words(d)} "
           "decimal places.")
    code = (f"r = df[{_c(a)}].corr(df[{_c(b)}], method={method!r})\n"
            f"print('correlation_coefficient:', round(r, {d}))")
    return Draft("pearson", ("Correlation Analysis",), "easy" if method == "pearson" else "medium", question,
                 constraints, fmt, (Step(f"Compute the {method} correlation between '{a}' and '{b}'.", code),),
                 ("correlation_coefficient",),
                 f"The {method} correlation of {a} and {b} is {{correlation_coefficient}}.", a)


def correlation_test(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 2:
        return None
    a, b = rng.sample(list(t.continuous), 2)
    question = rng.choice((
        f"Is there a significant linear relationship between \"{a}\" and \"{b}\"? Report the Pearson correlation "
        "coefficient and its p-value.",
        f"Test the correlation between {a} and {b} at the 0.05 significance level.",
    ))
    constraints = ("Use scipy.stats.pearsonr on the rows where both columns are present. The relationship is "
                   "'linear' if p < 0.05 and |r| >= 0.5, 'nonlinear' if p < 0.05 and |r| < 0.5, and 'none' if "
                   "p >= 0.05. Round r to two and p to four decimal places.")
    fmt = ("@correlation_coefficient[r] @p_value[p] @relationship_type[type] where \"type\" is linear, nonlinear "
           "or none.")
    s1 = Step("Keep the rows where both columns are present.",
              f"pair = df[[{_c(a)}, {_c(b)}]].dropna()\nprint(len(pair))")
    s2 = Step("Run the Pearson test and classify the relationship by the constraints.",
              f"from scipy import stats\n\nr, p = stats.pearsonr(pair[{_c(a)}], pair[{_c(b)}])\n"
              "if p >= 0.05:\n    kind = 'none'\nelif abs(r) >= 0.5:\n    kind = 'linear'\nelse:\n"
              "    kind = 'nonlinear'\nprint('correlation_coefficient:', round(r, 2))\n"
              "print('p_value:', round(p, 4))\nprint('relationship_type:', kind)")
    return Draft("correlation_test", ("Correlation Analysis",), "hard", question, constraints, fmt, (s1, s2),
                 ("correlation_coefficient", "p_value", "relationship_type"),
                 "r = {correlation_coefficient} with p = {p_value}, so the relationship is {relationship_type}.", a)


def strongest_pair(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 3:
        return None
    question = rng.choice((
        "Which pair of numeric columns has the strongest correlation (in absolute value)?",
        "Find the two numerical variables that are most strongly correlated, and their correlation.",
    ))
    constraints = ("Compute the Pearson correlation matrix of the numeric columns, ignore the diagonal, and take "
                   "the pair with the largest absolute correlation. Report the two names in the order they "
                   "appear in the data, and the coefficient rounded to two decimals.")
    fmt = "@column_1[name] @column_2[name] @correlation[r] where \"r\" is rounded to two decimal places."
    s1 = Step("Compute the correlation matrix of the numeric columns.",
              "corr = df.corr(numeric_only=True)\nprint(corr.round(2))")
    s2 = Step("Scan the pairs above the diagonal for the largest absolute value.",
              "cols = corr.columns\nbest = None\nfor i in range(len(cols)):\n    for j in range(i + 1, len(cols)):\n"
              "        r = corr.iloc[i, j]\n        if best is None or abs(r) > abs(best[2]):\n"
              "            best = (cols[i], cols[j], r)\nprint('column_1:', best[0])\nprint('column_2:', best[1])\n"
              "print('correlation:', round(best[2], 2))")
    return Draft("strongest_pair", ("Correlation Analysis", "Comprehensive Data Preprocessing"), "hard", question,
                 constraints, fmt, (s1, s2), ("column_1", "column_2", "correlation"),
                 "{column_1} and {column_2} are the most correlated pair (r = {correlation}).")


# ------------------------------------------------------------------------------------------ outlier detection


def zscore_outliers(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    k = rng.choice((2, 3, 3))
    question = rng.choice((
        f"Identify outliers in \"{col}\" using the Z-score method with a threshold of {k}. How many are there?",
        f"How many values of {col} have an absolute Z-score greater than {k}?",
    ))
    constraints = (f"Compute Z-scores with scipy.stats.zscore on '{col}' after dropping missing values. A value is "
                   f"an outlier if its absolute Z-score is greater than {k}.")
    fmt = "@outlier_count[count] where \"count\" is an integer."
    code = (f"from scipy import stats\nimport numpy as np\n\nvalues = df[{_c(col)}].dropna()\n"
            f"z = np.abs(stats.zscore(values))\nprint('outlier_count:', int((z > {k}).sum()))")
    return Draft("zscore_outliers", ("Outlier Detection",), "medium", question, constraints, fmt,
                 (Step(f"Compute the absolute Z-scores of '{col}' and count those above {k}.", code),),
                 ("outlier_count",), f"{{outlier_count}} values of {col} have |z| > {k}.", col)


def iqr_outliers(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    question = rng.choice((
        f"Detect outliers in the \"{col}\" column with the IQR method. How many outliers are there?",
        f"Using the interquartile range rule, count the outliers of {col} and give the bounds.",
    ))
    constraints = (f"Q1 and Q3 are the 25th and 75th percentiles of '{col}' (pandas quantile, missing values "
                   "ignored); outliers are below Q1 - 1.5*IQR or above Q3 + 1.5*IQR. Round bounds to two decimals.")
    fmt = ("@outlier_count[count] @lower_bound[low] @upper_bound[high] where \"count\" is an integer and the bounds "
           "are rounded to two decimal places.")
    s1 = Step(f"Compute the quartiles of '{col}'.",
              f"q1 = df[{_c(col)}].quantile(0.25)\nq3 = df[{_c(col)}].quantile(0.75)\niqr = q3 - q1\n"
              "print(q1, q3, iqr)")
    s2 = Step("Apply the 1.5 IQR rule and count the values outside the bounds.",
              f"low = q1 - 1.5 * iqr\nhigh = q3 + 1.5 * iqr\nvalues = df[{_c(col)}].dropna()\n"
              "count = int(((values < low) | (values > high)).sum())\nprint('outlier_count:', count)\n"
              "print('lower_bound:', round(low, 2))\nprint('upper_bound:', round(high, 2))")
    return Draft("iqr_outliers", ("Outlier Detection",), "medium", question, constraints, fmt, (s1, s2),
                 ("outlier_count", "lower_bound", "upper_bound"),
                 f"{{outlier_count}} values of {col} lie outside [{{lower_bound}}, {{upper_bound}}].", col)


# ------------------------------------------------------------------------------ comprehensive preprocessing


def missing_values(t: TableInfo, rng: random.Random) -> Draft | None:
    cols = t.with_missing or t.columns
    col = rng.choice(cols)
    question = rng.choice((
        f"What is the percentage of missing values in the \"{col}\" column?",
        f"How many values are missing in {col}, and what share of the rows is that?",
    ))
    constraints = "Missing values are NaN in the pandas DataFrame. Round the percentage to two decimal places."
    fmt = ("@missing_count[count] @missing_percentage[pct] where \"count\" is an integer and \"pct\" is between 0 "
           "and 100, rounded to two decimal places.")
    code = (f"missing = df[{_c(col)}].isna().sum()\nprint('missing_count:', int(missing))\n"
            "print('missing_percentage:', round(missing / len(df) * 100, 2))")
    return Draft("missing_values", ("Comprehensive Data Preprocessing",), "easy", question, constraints, fmt,
                 (Step(f"Count the NaN values of '{col}' and divide by the number of rows.", code),),
                 ("missing_count", "missing_percentage"),
                 f"{col} has {{missing_count}} missing values ({{missing_percentage}} %).", col)


def impute_then_stat(t: TableInfo, rng: random.Random) -> Draft | None:
    cols = [c for c in t.with_missing if c in t.continuous]
    if not cols:
        return None
    col = rng.choice(cols)
    how = rng.choice(("mean", "median"))
    question = rng.choice((
        f"Fill the missing values of \"{col}\" with the column's {how}, then report the new mean and standard "
        "deviation.",
        f"Impute missing {col} values by the {how} and compute the mean and standard deviation afterwards.",
    ))
    constraints = (f"Replace NaN in '{col}' by the {how} of the non-missing values; then compute the mean and the "
                   "sample standard deviation of the filled column. Round both to two decimal places.")
    fmt = "@mean_after[mean] @std_after[std] where both are rounded to two decimal places."
    s1 = Step(f"Check how many values of '{col}' are missing.", f"print(df[{_c(col)}].isna().sum())")
    s2 = Step(f"Fill them with the {how} and compute the statistics of the filled column.",
              f"filled = df[{_c(col)}].fillna(df[{_c(col)}].{how}())\nprint('mean_after:', round(filled.mean(), 2))\n"
              "print('std_after:', round(filled.std(), 2))")
    return Draft("impute_then_stat", ("Comprehensive Data Preprocessing", "Summary Statistics"), "medium", question,
                 constraints, fmt, (s1, s2), ("mean_after", "std_after"),
                 f"After filling with the {how}, {col} has mean {{mean_after}} and std {{std_after}}.", col)


def drop_missing_rows(t: TableInfo, rng: random.Random) -> Draft | None:
    question = rng.choice((
        "How many rows remain after removing every row that has at least one missing value?",
        "Drop the rows with any missing value. How many rows and how many missing cells were there?",
    ))
    constraints = "Use pandas dropna() with its defaults on the whole DataFrame."
    fmt = "@rows_remaining[count] @missing_cells[count] where both are integers (missing cells before dropping)."
    code = ("print('missing_cells:', int(df.isna().sum().sum()))\nclean = df.dropna()\n"
            "print('rows_remaining:', len(clean))")
    return Draft("drop_missing_rows", ("Comprehensive Data Preprocessing",), "easy", question, constraints, fmt,
                 (Step("Count the missing cells, then drop incomplete rows.", code),),
                 ("rows_remaining", "missing_cells"),
                 "{missing_cells} cells were missing; {rows_remaining} complete rows remain.")


# ---------------------------------------------------------------------------------------- feature engineering


def new_feature(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 2:
        return None
    a, b = rng.sample(list(t.continuous), 2)
    op, sym, word = rng.choice((("sum", "+", "sum"), ("diff", "-", "difference"), ("ratio", "/", "ratio")))
    new = f"{_snake(a)}_{op}"
    d = _decimals(rng)
    question = rng.choice((
        f"Create a new feature \"{new}\" as the {word} of \"{a}\" and \"{b}\" ({a} {sym} {b}). What is its mean?",
        f"Generate a column called {new} equal to {a} {sym} {b}, then calculate its mean and its Pearson "
        f"correlation with {a}.",
    ))
    constraints = (f"Compute '{new}' row by row as '{a}' {sym} '{b}'; drop rows where it is missing or infinite "
                   f"before the statistics. Round to {_dec_words(d)} decimal places.")
    fmt = (f"@{new}_mean[mean] @correlation_with_{_snake(a)}[r] where both are rounded to {_dec_words(d)} "
           "decimal places.")
    s1 = Step(f"Create '{new}' from '{a}' and '{b}'.",
              f"import numpy as np\n\ndf[{_c(new)}] = df[{_c(a)}] {sym} df[{_c(b)}]\n"
              f"df[{_c(new)}] = df[{_c(new)}].replace([np.inf, -np.inf], np.nan)\nprint(df[{_c(new)}].describe())")
    s2 = Step(f"Compute the mean of '{new}' and its correlation with '{a}'.",
              f"valid = df[[{_c(new)}, {_c(a)}]].dropna()\nprint('{new}_mean:', round(valid[{_c(new)}].mean(), {d}))\n"
              f"print('correlation_with_{_snake(a)}:', round(valid[{_c(new)}].corr(valid[{_c(a)}]), {d}))")
    return Draft("new_feature", ("Feature Engineering", "Correlation Analysis"), "medium", question, constraints,
                 fmt, (s1, s2), (f"{new}_mean", f"correlation_with_{_snake(a)}"),
                 f"{new} has mean {{{new}_mean}} and correlation {{correlation_with_{_snake(a)}}} with {a}.", b,
                 creates=new)


def binning(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    bins = rng.choice((3, 4, 5))
    question = rng.choice((
        f"Divide \"{col}\" into {bins} equal-width bins. How many rows fall into the most populated bin?",
        f"Categorise {col} into {bins} bins of equal width with pd.cut and count the rows per bin; which bin is "
        "the largest?",
    ))
    constraints = (f"Use pd.cut(df['{col}'], bins={bins}, labels=False) (bins numbered 0 to {bins - 1}); rows with "
                   "missing values are not counted.")
    fmt = "@largest_bin[index] @largest_bin_count[count] where both are integers."
    code = (f"df['bin'] = pd.cut(df[{_c(col)}], bins={bins}, labels=False)\ncounts = df['bin'].value_counts()\n"
            "print(counts.sort_index())\nprint('largest_bin:', int(counts.idxmax()))\n"
            "print('largest_bin_count:', int(counts.max()))")
    return Draft("binning", ("Feature Engineering", "Distribution Analysis"), "hard", question, constraints, fmt,
                 (Step(f"Cut '{col}' into {bins} equal-width bins and count the rows per bin.", code),),
                 ("largest_bin", "largest_bin_count"),
                 "Bin {largest_bin} is the largest with {largest_bin_count} rows.", col)


def log_transform(t: TableInfo, rng: random.Random) -> Draft | None:
    cols = [c for c in t.continuous if c in t.positive]
    if not cols:
        return None
    col = rng.choice(cols)
    question = rng.choice((
        f"Apply a natural log transformation to \"{col}\". How does the skewness change?",
        f"Create log_{_snake(col)} = ln({col}) and compare the skewness before and after the transformation.",
    ))
    constraints = (f"Use numpy.log on '{col}' (all its values are positive) after dropping missing values, and "
                   "pandas skew(). Round both skewness values to two decimal places.")
    fmt = "@skew_before[value] @skew_after[value] where both are rounded to two decimal places."
    code = (f"import numpy as np\n\nvalues = df[{_c(col)}].dropna()\nlogged = np.log(values)\n"
            "print('skew_before:', round(values.skew(), 2))\nprint('skew_after:', round(logged.skew(), 2))")
    return Draft("log_transform", ("Feature Engineering", "Distribution Analysis"), "hard", question, constraints,
                 fmt, (Step(f"Take the log of '{col}' and compare the skewness of both.", code),),
                 ("skew_before", "skew_after"), "The skewness goes from {skew_before} to {skew_after}.", col)


def standardize(t: TableInfo, rng: random.Random) -> Draft | None:
    if not t.continuous:
        return None
    col = rng.choice(t.continuous)
    method = rng.choice(("minmax", "zscore"))
    if method == "minmax":
        question = (f"Normalise \"{col}\" to the range [0, 1] with min-max scaling. "
                    "What is the mean of the scaled values?")
        constraints = ("Scaled value = (x - min) / (max - min), computed on the non-missing values. Round to four "
                       "decimal places.")
        code = (f"values = df[{_c(col)}].dropna()\nscaled = (values - values.min()) / (values.max() - values.min())\n"
                "print('scaled_mean:', round(scaled.mean(), 4))")
    else:
        question = f"Standardise \"{col}\" to Z-scores. What share of the standardised values lies between -1 and 1?"
        constraints = ("Z = (x - mean) / std with the sample standard deviation, on the non-missing values. "
                       "Report the share as a fraction rounded to four decimal places.")
        code = (f"values = df[{_c(col)}].dropna()\nz = (values - values.mean()) / values.std()\n"
                "print('scaled_mean:', round(((z >= -1) & (z <= 1)).mean(), 4))")
    fmt = "@scaled_mean[value] where \"value\" is rounded to four decimal places."
    return Draft("standardize", ("Feature Engineering", "Comprehensive Data Preprocessing"), "medium", question,
                 constraints, fmt, (Step(f"Scale '{col}' as the constraints say.", code),), ("scaled_mean",),
                 "The answer is {scaled_mean}.", col)


def _literal_words(value: object) -> str:
    """How a question writes a category value: strings quoted, numbers and booleans bare."""
    return f"\"{value}\"" if isinstance(value, str) else str(value)


def _number_words(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def filter_mean(t: TableInfo, rng: random.Random) -> Draft | None:
    cats = [c for c in t.categorical if t.top_values.get(c)]
    if not cats or not t.continuous:
        return None
    cat, num = rng.choice(cats), rng.choice(t.continuous)
    value = rng.choice(t.top_values[cat][:2])
    d = _decimals(rng)
    name = f"mean_{_snake(num)}"
    shown = _literal_words(value)
    question = rng.choice((
        f"What is the average {num} for the rows where {cat} is {shown}?",
        f"Calculate the mean \"{num}\" of the observations whose \"{cat}\" equals {shown}.",
        f"Among the rows with {cat} = {shown}, what is the mean value of {num}, and how many such rows are there?",
    ))
    constraints = (f"Keep only the rows where '{cat}' equals {value!r}, then take the mean of '{num}' ignoring "
                   f"missing values. Round the mean to {_dec_words(d)} decimal places.")
    fmt = (f"@{name}[value] @row_count[count] where \"value\" is rounded to {_dec_words(d)} decimal places and "
           "\"count\" is the number of rows kept.")
    code = (f"subset = df[df[{_c(cat)}] == {value!r}]\nprint('row_count:', len(subset))\n"
            f"print('{name}:', round(subset[{_c(num)}].mean(), {d}))")
    thought = rng.choice((f"Filter the rows where '{cat}' is {value!r} and average '{num}' over them.",
                          f"Select the rows with {cat} equal to {value!r}, count them and take the mean {num}."))
    return Draft("filter_mean", ("Summary Statistics", "Comprehensive Data Preprocessing"), "easy", question,
                 constraints, fmt, (Step(thought, code),), (name, "row_count"),
                 f"Over the {{row_count}} rows with {cat} = {value}, the mean {num} is {{{name}}}.", num)


def count_above(t: TableInfo, rng: random.Random) -> Draft | None:
    cols = [c for c in t.continuous if c in t.round_medians]
    if not cols:
        return None
    col = rng.choice(cols)
    threshold = t.round_medians[col]
    above = rng.random() < 0.6
    word, op = ("greater than", ">") if above else ("less than", "<")
    name = f"count_{'above' if above else 'below'}"
    shown = _number_words(threshold)
    question = rng.choice((
        f"How many rows have a {col} {word} {shown}?",
        f"Count the observations where \"{col}\" is {word} {shown}.",
        f"How many records in the dataset have {col} {op} {shown}? What percentage of all rows is that?",
    ))
    constraints = (f"Compare '{col}' with {shown} strictly ({op}); rows with a missing '{col}' do not count. The "
                   "percentage is over all rows, rounded to two decimal places.")
    fmt = (f"@{name}[count] @percentage[pct] where \"count\" is an integer and \"pct\" is between 0 and 100, "
           "rounded to two decimal places.")
    code = (f"mask = df[{_c(col)}] {op} {threshold!r}\ncount = int(mask.sum())\nprint('{name}:', count)\n"
            "print('percentage:', round(count / len(df) * 100, 2))")
    return Draft("count_above", ("Summary Statistics",), "easy", question, constraints, fmt,
                 (Step(f"Count the rows where '{col}' {op} {shown} and divide by the number of rows.", code),),
                 (name, "percentage"), f"{{{name}}} rows ({{percentage}} %) have {col} {op} {shown}.", col)


def flag_feature(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 2:
        return None
    a, b = rng.sample(list(t.continuous), 2)
    new = f"high_{_snake(a)}"
    d = _decimals(rng)
    question = rng.choice((
        f"Create a new binary feature \"{new}\" that is 1 when {a} is above its median and 0 otherwise. What "
        f"is the mean {b} in each of the two groups?",
        f"Add a column {new} flagging the rows whose {a} exceeds the median {a}. Compare the average {b} of the "
        "flagged and the other rows.",
    ))
    constraints = (f"'{new}' is 1 where '{a}' is strictly greater than its median (missing values ignored for the "
                   f"median) and 0 otherwise. Take the mean of '{b}' in each group, ignoring missing values, rounded "
                   f"to {_dec_words(d)} decimal places.")
    fmt = (f"@mean_{_snake(b)}_high[value] @mean_{_snake(b)}_low[value] where both are rounded to "
           f"{_dec_words(d)} decimal places.")
    s1 = Step(f"Create the flag '{new}' from the median of '{a}'.",
              f"median_a = df[{_c(a)}].median()\ndf[{_c(new)}] = (df[{_c(a)}] > median_a).astype(int)\n"
              f"print(df[{_c(new)}].value_counts())")
    s2 = Step(f"Average '{b}' in each group of '{new}'.",
              f"means = df.groupby({_c(new)})[{_c(b)}].mean()\nprint(means)\n"
              f"print('mean_{_snake(b)}_high:', round(means[1], {d}))\n"
              f"print('mean_{_snake(b)}_low:', round(means[0], {d}))")
    return Draft("flag_feature", ("Feature Engineering", "Summary Statistics"), "medium", question, constraints,
                 fmt, (s1, s2), (f"mean_{_snake(b)}_high", f"mean_{_snake(b)}_low"),
                 f"The mean {b} is {{mean_{_snake(b)}_high}} above the median {a} and {{mean_{_snake(b)}_low}} "
                 "otherwise.", a, creates=new)


# ------------------------------------------------------------------------------------------ machine learning


def linear_regression(t: TableInfo, rng: random.Random) -> Draft | None:
    if len(t.continuous) < 3:
        return None
    target = rng.choice(t.continuous)
    features = rng.sample([c for c in t.continuous if c != target], min(len(t.continuous) - 1, rng.choice((1, 2, 3))))
    size = rng.choice((0.2, 0.3))
    names = ", ".join(features)
    question = rng.choice((
        f"Train a linear regression model to predict \"{target}\" from {names}. What is the RMSE on the test set?",
        f"Build a LinearRegression model with the features {names} and the target {target}; evaluate it with the "
        "root mean squared error and R-squared on a held-out test set.",
    ))
    constraints = (f"Drop rows with missing values in the used columns. Split with sklearn's train_test_split, "
                   f"test_size={size}, random_state=42. Fit sklearn's LinearRegression() on the training set and "
                   "evaluate on the test set. Round the RMSE and R-squared to two decimal places.")
    fmt = "@rmse[value] @r_squared[value] where both are rounded to two decimal places."
    cols = ", ".join(_c(c) for c in features)
    s1 = Step("Select the features and the target, dropping incomplete rows, and split the data.",
              f"from sklearn.model_selection import train_test_split\n\ndata = df[[{cols}, {_c(target)}]].dropna()\n"
              f"X = data[[{cols}]]\ny = data[{_c(target)}]\n"
              f"X_train, X_test, y_train, y_test = train_test_split(X, y, test_size={size}, random_state=42)\n"
              "print(X_train.shape, X_test.shape)")
    s2 = Step("Fit the model and evaluate it on the test set.",
              "import numpy as np\nfrom sklearn.linear_model import LinearRegression\n"
              "from sklearn.metrics import mean_squared_error, r2_score\n\n"
              "model = LinearRegression().fit(X_train, y_train)\npred = model.predict(X_test)\n"
              "print('rmse:', round(np.sqrt(mean_squared_error(y_test, pred)), 2))\n"
              "print('r_squared:', round(r2_score(y_test, pred), 2))")
    return Draft("linear_regression", ("Machine Learning",), "hard", question, constraints, fmt, (s1, s2),
                 ("rmse", "r_squared"), f"The model predicts {target} with RMSE {{rmse}} and R-squared {{r_squared}}.",
                 target)


def classifier(t: TableInfo, rng: random.Random) -> Draft | None:
    targets = [c for c in t.categorical if 2 <= t.cardinality.get(c, 0) <= 5]
    if not targets or len(t.continuous) < 2:
        return None
    target = rng.choice(targets)
    features = rng.sample(list(t.continuous), min(len(t.continuous), rng.choice((2, 3))))
    model, imp, ctor = rng.choice((("logistic regression", "from sklearn.linear_model import LogisticRegression",
                                    "LogisticRegression(max_iter=1000)"),
                                   ("random forest", "from sklearn.ensemble import RandomForestClassifier",
                                    "RandomForestClassifier(n_estimators=100, random_state=42)"),
                                   ("decision tree", "from sklearn.tree import DecisionTreeClassifier",
                                    "DecisionTreeClassifier(random_state=42)")))
    names = ", ".join(features)
    question = rng.choice((
        f"Train a {model} classifier to predict \"{target}\" using {names}. What is the accuracy on the test set?",
        f"Predict {target} from {names} with a {model} model and report the test accuracy.",
    ))
    constraints = (f"Drop rows with missing values in the used columns. Use train_test_split with test_size=0.3 and "
                   f"random_state=42, sklearn's {ctor}, and accuracy_score on the test set, rounded to two "
                   "decimal places.")
    fmt = "@accuracy[value] where \"value\" is between 0 and 1, rounded to two decimal places."
    cols = ", ".join(_c(c) for c in features)
    s1 = Step("Prepare features and target without missing values and split them.",
              f"from sklearn.model_selection import train_test_split\n\ndata = df[[{cols}, {_c(target)}]].dropna()\n"
              f"X = data[[{cols}]]\ny = data[{_c(target)}].astype(str)\nprint(y.value_counts())\n"
              "X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=42)")
    s2 = Step(f"Fit the {model} and measure its accuracy on the test set.",
              f"{imp}\nfrom sklearn.metrics import accuracy_score\n\nclf = {ctor}\nclf.fit(X_train, y_train)\n"
              "print('accuracy:', round(accuracy_score(y_test, clf.predict(X_test)), 2))")
    return Draft("classifier", ("Machine Learning",), "hard", question, constraints, fmt, (s1, s2), ("accuracy",),
                 f"The {model} reaches a test accuracy of {{accuracy}}.", target)


def ttest_groups(t: TableInfo, rng: random.Random) -> Draft | None:
    targets = [c for c in t.categorical if t.cardinality.get(c, 0) == 2]
    if not targets or not t.continuous:
        return None
    cat, num = rng.choice(targets), rng.choice(t.continuous)
    question = rng.choice((
        f"Is there a significant difference in \"{num}\" between the two groups of \"{cat}\"?",
        f"Compare the mean {num} of the two {cat} groups with an independent two-sample t-test.",
    ))
    constraints = (f"Split '{num}' (missing values dropped) by the two values of '{cat}' in sorted order and run "
                   "scipy.stats.ttest_ind with equal variances assumed. Significant if p < 0.05. Round the "
                   "t statistic to two and the p-value to four decimal places.")
    fmt = "@t_statistic[t] @p_value[p] @significant[answer] where \"answer\" is yes or no."
    s1 = Step(f"Look at the groups of '{cat}' and their mean {num}.",
              f"print(df.groupby({_c(cat)})[{_c(num)}].agg(['count', 'mean']))")
    s2 = Step("Run the t-test between the two groups.",
              f"from scipy import stats\n\ngroups = sorted(df[{_c(cat)}].dropna().unique())\n"
              f"a = df.loc[df[{_c(cat)}] == groups[0], {_c(num)}].dropna()\n"
              f"b = df.loc[df[{_c(cat)}] == groups[1], {_c(num)}].dropna()\nt, p = stats.ttest_ind(a, b)\n"
              "print('t_statistic:', round(t, 2))\nprint('p_value:', round(p, 4))\n"
              "print('significant:', 'yes' if p < 0.05 else 'no')")
    return Draft("ttest_groups", ("Summary Statistics", "Distribution Analysis"), "hard", question, constraints,
                 fmt, (s1, s2), ("t_statistic", "p_value", "significant"),
                 "t = {t_statistic}, p = {p_value}: significant difference: {significant}.", num)


PROGRAMS: dict[str, Program] = {
    f.__name__: f
    for f in (mean_of_column, count_categories, group_mean, conditional_mean, skew_kurtosis, normality_test,
              share_above, pearson, correlation_test, strongest_pair, zscore_outliers, iqr_outliers,
              missing_values, impute_then_stat, drop_missing_rows, new_feature, binning, log_transform,
              standardize, linear_regression, classifier, ttest_groups, filter_mean, count_above, flag_feature)
}
