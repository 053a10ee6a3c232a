"""``jupiter serve``: run the search service (the HTTP API of docs/serve.md) until Ctrl-C.

Binds 127.0.0.1:8700 by default. On any other address a token is required (``--token`` or ``--token-file``)
and every API request must send it as ``Authorization: Bearer <token>``. Jobs live in a SQLite database
(``--db``); a restarted server finds every accepted job and re-queues the ones that were running.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path

from jupiter.commands.search_args import add_value_model_argument
from jupiter.llm import PolicyError
from jupiter.task import TaskError
from search.loaders import LoadError

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve", help="run the search as an HTTP service (job API, live trees, SQLite job store)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="default",
                        help="policy spec, loaded once for every job: default | replay:FILE.json | "
                             "http://HOST:PORT/v1#model=NAME | vllm:PATH | hf:PATH")
    add_value_model_argument(parser)
    parser.add_argument("--profile", default="paper", help="search settings profile (default: paper)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8700)
    parser.add_argument("--db", type=Path, default=Path("jupiter-serve/jobs.sqlite"),
                        help="SQLite job database (default jupiter-serve/jobs.sqlite)")
    parser.add_argument("--data-root", type=Path, default=None,
                        help="folder of the job folders (default: jobs/ beside the database)")
    parser.add_argument("--max-trees", type=int, default=16, help="trees searched at once over all jobs")
    auth = parser.add_mutually_exclusive_group()
    auth.add_argument("--token", default=None, help="bearer token every API request must send")
    auth.add_argument("--token-file", type=Path, default=None, help="file holding the token (first line)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="run the trees on this Ray cluster (e.g. 127.0.0.1:6379 or auto)")
    parser.add_argument("--gc-days", type=float, default=None,
                        help="remove finished jobs (database row and files) older than this many days")
    parser.add_argument("--max-upload-mb", type=float, default=100.0, help="total size of a job's files")
    parser.add_argument("--max-files", type=int, default=20, help="data files per job")
    parser.add_argument("--max-queue", type=int, default=1000, help="queued jobs before submissions get 429")
    parser.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell for every job")
    parser.add_argument("--driver", choices=("thread", "process"), default="thread",
                        help="where the trees run: threads of the server process (default), or a child process "
                             "that loads the policy, so that a crash there does not take the API down (it is "
                             "restarted and its jobs re-queued)")
    parser.add_argument("--nice", type=int, default=10, metavar="N",
                        help="niceness added to the search (the cells' sandboxes; with --driver process the whole "
                             "driver), so the API answers first when both want the CPU; 0 keeps it level "
                             "(default 10)")
    parser.set_defaults(handler=run)
    return parser


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is None:
        return args.token
    try:
        text = args.token_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"--token-file {args.token_file}: cannot read it ({exc})") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise TaskError(f"--token-file {args.token_file}: the file is empty")
    return token


def _port_busy(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (None when it can)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def run(args: argparse.Namespace) -> int:
    # the service's modules load FastAPI, uvicorn and the scheduler (about a second): only for this command
    import uvicorn

    from jupiter.serve.app import create_app
    from jupiter.serve.backend import start_backend
    from jupiter.serve.config import ServeConfig, ServeConfigError
    from jupiter.serve.driver_process import DriverStartError
    from jupiter.serve.jobs import SubmissionError, search_config

    try:
        config = ServeConfig(
            llm=args.llm, value_model=args.value_model, profile=args.profile, host=args.host, port=args.port,
            db=args.db, data_root=args.data_root, max_trees=args.max_trees, token=_token(args),
            ray_address=args.ray, gc_days=args.gc_days, max_upload_mb=args.max_upload_mb, max_files=args.max_files,
            max_queue=args.max_queue, cell_timeout=args.cell_timeout, driver=args.driver,
            nice=args.nice)
    except ServeConfigError as exc:
        print(f"jupiter serve: error: {exc}", file=sys.stderr)
        return 2
    if config.value_model is not None and not config.value_model.is_dir():  # before the (slow) policy loads
        print(f"jupiter serve: error: --value-model {config.value_model}: folder not found", file=sys.stderr)
        return 2
    try:  # a bad --profile would otherwise refuse every job
        search_config({}, config.profile, config.max_trees, config.cell_timeout)
    except SubmissionError as exc:
        print(f"jupiter serve: error: --profile {config.profile}: {exc}", file=sys.stderr)
        return 2
    busy = _port_busy(config.host, config.port)
    if busy:  # say so before the (slow) policy loads
        print(f"jupiter serve: error: --host/--port: cannot listen on {config.host}:{config.port} ({busy})",
              file=sys.stderr)
        return 2

    logging.getLogger("jupiter").setLevel(logging.INFO)
    try:
        backend = start_backend(config)
    except (DriverStartError, LoadError) as exc:
        print(f"jupiter serve: error: {exc}", file=sys.stderr)
        return 2
    except PolicyError as exc:
        print(f"jupiter serve: error: --llm: {exc}", file=sys.stderr)
        return 2
    driver = backend.driver
    try:
        app = create_app(config, policy=backend.policy, value=backend.value, driver=driver)
        print(f"jupiter serve: http://{config.host}:{config.port}/ (database {config.db})", file=sys.stderr)
        uvicorn.run(app, host=config.host, port=config.port, log_level="warning", timeout_graceful_shutdown=10)
    except PolicyError as exc:
        print(f"jupiter serve: error: --llm: {exc}", file=sys.stderr)
        return 2
    finally:
        if driver is not None:  # uvicorn did not start (or ended): the lifespan may never have stopped it
            driver.shutdown()
    return 0
