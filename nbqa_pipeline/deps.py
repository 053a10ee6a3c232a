"""Find the data files a notebook reads, from its own code.

Why ``ast`` first and regexes second: most notebooks parse once their magics are commented out, and the
syntax tree lets us follow a path through a variable (``filename = 'HR.csv'``; ``pd.read_csv(filename)``),
``os.path.join`` and string concatenation, and read the call's options (``sep``, ``header``) that the row
counter needs. Cells that still do not parse fall back to regexes over string-literal calls. Paths built
from values we cannot know (loop variables, user input) are skipped and counted as unresolved.
"""

from __future__ import annotations

import ast
import enum
import logging
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from nbqa_pipeline.notebook import LoadedNotebook, clean_code

__all__ = [
    "ReadKind",
    "DataRef",
    "Dependencies",
    "extract_dependencies",
    "resolve_path",
    "PANDAS_READERS",
]

log = logging.getLogger(__name__)

PANDAS_READERS = frozenset(
    {"read_csv", "read_excel", "read_json", "read_parquet", "read_table", "read_pickle", "read_feather", "read_fwf"}
)
NUMPY_READERS = frozenset({"loadtxt", "genfromtxt"})
WRITERS = frozenset(
    {"to_csv", "to_excel", "to_json", "to_parquet", "to_pickle", "to_feather", "savetxt", "savefig", "dump"}
)
PATH_KEYWORDS = ("filepath_or_buffer", "io", "path", "path_or_buf", "fname", "file", "database", "filename")
# Options of a pandas read call that change how many rows it sees; only literal values are kept.
ROW_OPTIONS = frozenset(
    {"sep", "delimiter", "header", "names", "skiprows", "skipfooter", "sheet_name", "encoding", "comment",
     "delim_whitespace", "skip_header", "lines", "orient", "compression", "engine", "index_col"}
)
URL_PATTERN = re.compile(r"(?:https?|ftp)://[^\s'\"<>\)\]]+")
_FALLBACK = re.compile(
    r"(?P<func>read_(?:csv|excel|json|parquet|table|pickle|feather|fwf)|loadtxt|genfromtxt|(?<![\w.])open|connect)"
    r"\(\s*[rRbBuU]?(?P<q>['\"])(?P<path>[^'\"\n]+)(?P=q)"
)


class ReadKind(str, enum.Enum):
    """Which library reads the file; the row counter only trusts pandas and numpy reads."""

    PANDAS = "pandas"
    NUMPY = "numpy"
    OPEN = "open"
    SQLITE = "sqlite"


@dataclass(frozen=True)
class DataRef:
    """One data file a notebook reads, as written in its code (after following variables)."""

    path: str
    call: str
    kind: ReadKind
    cell_index: int
    options: tuple[tuple[str, Any], ...] = ()
    source_urls: tuple[str, ...] = ()

    @property
    def is_url(self) -> bool:
        return bool(re.match(r"^(?:https?|ftp|s3|gs)://", self.path, re.I))

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "call": self.call,
            "kind": self.kind.value,
            "cell_index": self.cell_index,
            "options": {k: v for k, v in self.options},
            "source_urls": list(self.source_urls),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataRef:
        return cls(
            path=data["path"],
            call=data["call"],
            kind=ReadKind(data["kind"]),
            cell_index=int(data["cell_index"]),
            options=tuple(sorted(dict(data.get("options") or {}).items())),
            source_urls=tuple(data.get("source_urls") or ()),
        )


@dataclass(frozen=True)
class Dependencies:
    """Every file read (first read wins for options), URL reads and reads whose path is unknown."""

    refs: tuple[DataRef, ...]
    unresolved: tuple[str, ...] = field(default=())

    @property
    def local(self) -> tuple[DataRef, ...]:
        return tuple(r for r in self.refs if not r.is_url)

    @property
    def urls(self) -> tuple[DataRef, ...]:
        return tuple(r for r in self.refs if r.is_url)


def resolve_path(path: str, notebook_path: str) -> str | None:
    """Resolve ``path`` as written in a notebook against the notebook's folder inside its repository.

    Returns the repository-relative POSIX path, or None when it cannot be inside the repository
    (absolute paths, ``~``, paths that climb above the repository root, URLs).
    """
    cleaned = path.strip().replace("\\", "/")
    if not cleaned or cleaned.startswith(("/", "~")) or re.match(r"^[A-Za-z]:/", cleaned) or "://" in cleaned:
        return None
    if cleaned.startswith("file:"):
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(notebook_path), cleaned))
    if joined == ".." or joined.startswith("../") or joined == ".":
        return None
    return joined


# ------------------------------------------------------------------------------------------ ast walking


def _call_name(func: ast.expr) -> tuple[str, str]:
    """(receiver, name) of a call: ``pd.read_csv`` -> ("pd", "read_csv"); ``open`` -> ("", "open")."""
    if isinstance(func, ast.Attribute):
        receiver = func.value
        if isinstance(receiver, ast.Name):
            return receiver.id, func.attr
        if isinstance(receiver, ast.Attribute):
            return receiver.attr, func.attr
        return "", func.attr
    if isinstance(func, ast.Name):
        return "", func.id
    return "", ""


class _Walker(ast.NodeVisitor):
    """Visits a cell in source order, tracking string variables and collecting reads and writes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        # reads and writes in source order: ("read", (path, call, kind, options)) or ("write", path)
        self.events: list[tuple[str, Any]] = []
        self.unresolved: list[str] = []

    # --- constant folding of path expressions
    def value(self, node: ast.expr | None) -> str | None:
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    parts.append(part.value)
                elif isinstance(part, ast.FormattedValue):
                    inner = self.value(part.value)
                    if inner is None:
                        return None
                    parts.append(inner)
                else:
                    return None
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
            left, right = self.value(node.left), self.value(node.right)
            if left is None or right is None:
                return None
            return left + right if isinstance(node.op, ast.Add) else posixpath.join(left, right)
        if isinstance(node, ast.Call):
            # os.path.join(a, b), Path(a, b) and a.joinpath(b): all join the known parts (Path() is no file)
            receiver, name = _call_name(node.func)
            if name == "joinpath" and isinstance(node.func, ast.Attribute):
                args = [node.func.value, *node.args]
            elif (name in {"Path", "PurePath", "PosixPath"}
                  or (name == "join" and receiver in {"path", "os", "posixpath", "ntpath"})):
                args = list(node.args)
            else:
                return None
            parts = [self.value(a) for a in args]
            if parts and all(p is not None for p in parts):
                return posixpath.join(*parts)  # type: ignore[arg-type]
            return None
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        text = self.value(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name):
                if text is not None:
                    self.env[target.id] = text
                else:
                    self.env.pop(target.id, None)

    def _path_arg(self, node: ast.Call) -> tuple[ast.expr | None, bool]:
        if node.args:
            return node.args[0], True
        for kw in node.keywords:
            if kw.arg in PATH_KEYWORDS:
                return kw.value, True
        return None, False

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        receiver, name = _call_name(node.func)
        kind: ReadKind | None = None
        if name in PANDAS_READERS:
            kind = ReadKind.PANDAS
        elif name in NUMPY_READERS:
            kind = ReadKind.NUMPY
        elif name == "open" and receiver in {"", "io", "codecs"}:
            kind = ReadKind.OPEN
        elif name == "connect" and receiver == "sqlite3":
            kind = ReadKind.SQLITE
        elif name == "create_engine":
            target = self.value(node.args[0]) if node.args else None
            if target and target.startswith("sqlite:///"):
                self.events.append(("read", (target[len("sqlite:///"):], name, ReadKind.SQLITE, ())))
            return
        elif name in WRITERS:
            arg, _ = self._path_arg(node)
            written = self.value(arg)
            if written:
                self.events.append(("write", written))
            return
        if kind is None:
            return
        arg, present = self._path_arg(node)
        if not present:
            return
        path = self.value(arg)
        if kind is ReadKind.OPEN:
            mode = self.value(node.args[1]) if len(node.args) > 1 else None
            for kw in node.keywords:
                if kw.arg == "mode":
                    mode = self.value(kw.value)
            if mode and any(ch in mode for ch in "wax"):
                if path:
                    self.events.append(("write", path))
                return
        if path is None:
            if not isinstance(arg, ast.Constant):  # e.g. a buffer, a loop variable, a URL built at run time
                self.unresolved.append(f"{name}({ast.unparse(arg)[:80]})")
            return
        if kind is ReadKind.SQLITE and path == ":memory:":
            return
        options: list[tuple[str, Any]] = []
        for kw in node.keywords:
            if kw.arg in ROW_OPTIONS:
                try:
                    options.append((kw.arg, ast.literal_eval(kw.value)))
                except (ValueError, SyntaxError, TypeError):
                    continue
        self.events.append(("read", (path, name, kind, tuple(sorted(options, key=lambda kv: kv[0])))))


def _fallback_reads(source: str) -> list[tuple[str, str, ReadKind, tuple[tuple[str, Any], ...]]]:
    reads = []
    for match in _FALLBACK.finditer(source):
        func = match.group("func")
        kind = (
            ReadKind.PANDAS if func.startswith("read_")
            else ReadKind.NUMPY if func in NUMPY_READERS
            else ReadKind.SQLITE if func == "connect"
            else ReadKind.OPEN
        )
        if kind is ReadKind.SQLITE and "sqlite3.connect" not in source[max(0, match.start() - 8): match.end()]:
            continue
        if kind is ReadKind.OPEN:
            rest = source[match.end(): match.end() + 40]
            mode = re.match(r"\s*,\s*(?:mode\s*=\s*)?['\"]([^'\"]*)['\"]", rest)
            if mode and any(ch in mode.group(1) for ch in "wax"):
                continue
        reads.append((match.group("path"), func, kind, ()))
    return reads


def _comment_urls(source: str) -> list[str]:
    urls = []
    for line in source.splitlines():
        stripped = line.strip()
        if "#" in stripped or stripped.startswith(("!", "%")):
            part = stripped if stripped.startswith(("!", "%")) else stripped[stripped.index("#"):]
            urls.extend(URL_PATTERN.findall(part))
    return urls


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item.rstrip(".,;:"), None)
    return tuple(seen)


def extract_dependencies(notebook: LoadedNotebook) -> Dependencies:
    """The data files ``notebook`` reads, in first-read order, with link hints for each.

    A file the notebook itself wrote earlier (``to_csv``, ``open(..., 'w')``) is not a dependency. For
    each file, URLs found in the reading cell's comments or shell lines and in the markdown cells just
    before it are kept in ``source_urls`` — where a missing file can be fetched from.
    """
    env: dict[str, str] = {}
    written: set[str] = set()
    found: dict[str, DataRef] = {}
    unresolved: list[str] = []
    for cell in notebook.code_cells:
        walker = _Walker(env)
        try:
            walker.visit(ast.parse(clean_code(cell.source)))
            events = walker.events
            unresolved.extend(walker.unresolved)
        except (SyntaxError, ValueError, RecursionError):
            log.debug("%s: cell %d does not parse; using regexes", notebook.path, cell.index)
            events = [("read", read) for read in _fallback_reads(cell.source)]
        hints = _comment_urls(cell.source)
        for markdown in notebook.markdown_before(cell.index):
            hints.extend(URL_PATTERN.findall(markdown))
        for event, payload in events:
            if event == "write":
                written.add(str(payload).strip())
                continue
            path, call, kind, options = payload
            key = path.strip()
            if not key or key in found or key in written:
                continue
            url_hints = () if re.match(r"^\w+://", key) else _unique(hints)
            found[key] = DataRef(key, call, kind, cell.index, options, url_hints)
    # A link anywhere in the notebook that ends with the file's name (``#!wget .../hypothyroid.csv``).
    everywhere = [u for cell in notebook.cells for u in URL_PATTERN.findall(cell.source)]
    refs = []
    for ref in found.values():
        if not ref.is_url:
            base = posixpath.basename(ref.path.replace("\\", "/"))
            named = [u for u in everywhere if base and posixpath.basename(u.rstrip("/.,;:")) == base]
            if named:
                ref = replace(ref, source_urls=_unique([*named, *ref.source_urls]))
        refs.append(ref)
    return Dependencies(refs=tuple(refs), unresolved=tuple(unresolved))
