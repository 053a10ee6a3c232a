"""Well-known teaching datasets that a mined task must not be built on.

Why: tasks on famous datasets are memorised by models and repeated across thousands of notebooks, so they
say little about analysis skill. The keyword list is the one the NbQA paper names. Matching is on token
boundaries where letters and digits are word characters and anything else (``_``, ``-``, ``.``, ``/``,
spaces, camel-case joins after lower-casing) separates, so ``load_iris`` and ``Bike_Sharing`` match while
``microsoft`` does not match ``icr``. In code, only what names a dataset counts: identifiers (``load_iris``,
``fetch_20newsgroups``) and the string arguments of loading calls (``sns.load_dataset('titanic')``,
``read_csv('titanic.csv')``) — not comments, prose in plot titles or printed text. Data-file *names* also match on a
prefix (``winequality-white.csv`` is wine data); very short keywords never match on a prefix.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from nbqa_pipeline.notebook import clean_code

__all__ = ["BLACKLIST", "BlacklistHit", "find_in_names", "find_in_text", "code_mentions"]

BLACKLIST: tuple[str, ...] = (
    "iris", "boston", "wine", "breast cancer", "wisconsin", "titanic", "house prices", "adult", "diabetes",
    "heart disease", "student performance", "car evaluation", "credit card fraud", "santander", "icr", "mnist",
    "fashion_mnist", "cifar", "imagenet", "coco", "librispeech", "voxceleb", "urban sound", "common voice",
    "million song", "fma", "gtzan", "air quality", "bike sharing", "electricityload", "webscope", "numenta",
    "20newsgroups", "imdb", "amazon reviews", "quora question pairs", "ag news", "sst", "sms spam", "trec",
    "yahoo answers", "openml", "squad", "sentiment140",
)
# Keywords too short or too common as word starts to match a file-name prefix.
_NO_PREFIX = frozenset({"icr", "fma", "sst", "coco", "trec", "adult", "squad"})


@dataclass(frozen=True)
class BlacklistHit:
    """A keyword and where it was found (a file name, or a code excerpt)."""

    keyword: str
    where: str


@cache
def _pattern(keyword: str, prefix: bool) -> re.Pattern[str]:
    words = [re.escape(w) for w in re.split(r"[\s_]+", keyword.lower()) if w]
    body = r"[\s_\-\.]*".join(words)
    tail = "" if prefix else r"(?![a-z0-9])"
    return re.compile(r"(?<![a-z0-9])" + body + tail)


def find_in_text(text: str, keywords: Iterable[str] = BLACKLIST) -> list[BlacklistHit]:
    """Every keyword found in ``text`` on token boundaries, with a short excerpt of where."""
    lowered = text.lower()
    hits = []
    for keyword in keywords:
        match = _pattern(keyword, False).search(lowered)
        if match:
            start = max(0, match.start() - 30)
            hits.append(BlacklistHit(keyword, text[start: match.end() + 30].replace("\n", " ")))
    return hits


def find_in_names(names: Iterable[str], keywords: Iterable[str] = BLACKLIST) -> list[BlacklistHit]:
    """Keywords in data-file names; a keyword may also be the start of a name token (``winequality``)."""
    hits = []
    for name in names:
        lowered = name.lower().replace("\\", "/")
        for keyword in keywords:
            if _pattern(keyword, keyword not in _NO_PREFIX).search(lowered):
                hits.append(BlacklistHit(keyword, name))
    return hits


_LOADER_CALL = re.compile(r"^(?:load_|fetch_|read_|get_rdataset$|open$|loadtxt$|genfromtxt$|load_data$)")
_STRING_OR_COMMENT = re.compile(r"#.*$|'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'[^'\n]*'|\"[^\"\n]*\"", re.M)


class _Mentions(ast.NodeVisitor):
    def __init__(self) -> None:
        self.parts: list[str] = []

    def visit_Name(self, node: ast.Name) -> None:
        self.parts.append(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.parts.append(node.attr)
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        self.parts.append(node.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.parts.append(node.module or "")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.parts.append(node.name)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if _LOADER_CALL.match(name):
            for arg in [*node.args, *(kw.value for kw in node.keywords)]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    self.parts.append(arg.value)
        self.generic_visit(node)


def code_mentions(sources: Iterable[str]) -> str:
    """The parts of code cells that can name a dataset: identifiers and loader-call string arguments.

    Cells that do not parse lose their comments and string literals and keep the rest.
    """
    parts: list[str] = []
    for source in sources:
        try:
            visitor = _Mentions()
            visitor.visit(ast.parse(clean_code(source)))
            parts.extend(visitor.parts)
        except (SyntaxError, ValueError, RecursionError):
            parts.append(_STRING_OR_COMMENT.sub(" ", source))
    return "\n".join(parts)
