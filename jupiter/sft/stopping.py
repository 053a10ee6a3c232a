"""Stopping a ``Trainer`` run cleanly on SIGINT/SIGTERM, shared by ``jupiter sft`` and the value model's training.

Why not ``Trainer``'s own handling: it has none; a signal kills the process between checkpoints and loses every
step since the last one. The flag turns the first SIGINT or SIGTERM into "stop after this optimizer step and save a
checkpoint" (the trainers' callbacks read it); a second Ctrl-C stops at once, without one.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["StopFlag", "stop_callback"]

log = logging.getLogger(__name__)


class StopFlag:
    """Set by SIGINT/SIGTERM; a trainer callback then ends training after the current optimizer step and saves.

    ``what``: the run's name in the warning the signal prints ("value training", "SFT").
    """

    def __init__(self, what: str = "training") -> None:
        self.what = what
        self.signal: int | None = None

    def install(self) -> Callable[[], None]:
        """Installs the handlers (main thread only: elsewhere this does nothing); returns the function that puts
        the previous ones back."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum: int, frame: Any) -> None:
            if self.signal is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
            self.signal = signum
            log.warning("%s: stopping %s after this optimizer step and saving a checkpoint (Ctrl-C again to stop "
                        "at once, without one)", signal.Signals(signum).name, self.what)

        for sig in previous:
            signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore


def stop_callback(flag: StopFlag) -> Any:
    """The ``TrainerCallback`` that ends training with a checkpoint after the optimizer step in which ``flag`` was
    set."""
    from transformers import TrainerCallback

    class StopOnSignal(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if flag.signal is not None:
                control.should_save = True
                control.should_training_stop = True
            return control

    return StopOnSignal()
