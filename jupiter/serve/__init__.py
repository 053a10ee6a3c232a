"""``jupiter serve``: the search as a long-running service (FastAPI + uvicorn, a SQLite job store).

    from jupiter.serve import ServeConfig, create_app
    app = create_app(ServeConfig(llm="replay:script.json", db="jobs.sqlite"))   # an ASGI app for uvicorn

One policy and one batched driver serve every job (``scheduler``); jobs, progress and trees live in SQLite
(``store``); live trees stream as Server-Sent Events (``events``); a bearer token guards the API off loopback
(``auth``); ``/metrics`` speaks Prometheus (``metrics``). See docs/serve.md.
"""

from jupiter.serve.app import ServerState, create_app
from jupiter.serve.config import ServeConfig, ServeConfigError, is_loopback
from jupiter.serve.jobs import SubmissionError
from jupiter.serve.store import JobRecord, JobStatus, JobStore

__all__ = [
    "create_app",
    "ServerState",
    "ServeConfig",
    "ServeConfigError",
    "is_loopback",
    "SubmissionError",
    "JobRecord",
    "JobStatus",
    "JobStore",
]
