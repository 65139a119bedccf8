"""Hot loading: a thread that calls :meth:`ModelManager.refresh` every few seconds.

``--file_system_poll_wait_seconds`` (TF Serving's flag, default 1) is the wait between
two looks at every model's base path; 0 turns polling off after start-up.
"""

from __future__ import annotations

import logging
import threading

from servectl.modelserver.models import ModelManager

log = logging.getLogger(__name__)


class VersionPoller:
    """Refreshes ``manager`` every ``interval_s`` seconds until :meth:`stop`."""

    def __init__(self, manager: ModelManager, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.manager = manager
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="version-poller", daemon=True)

    def start(self) -> VersionPoller:
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop polling; waits for a refresh in progress (a load) to finish."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.manager.refresh()
            except Exception:  # keep polling: one bad look must not stop hot loading
                log.exception("Polling model base paths failed")


def start_poller(manager: ModelManager, poll_wait_seconds: float) -> VersionPoller | None:
    """A started poller, or None when ``poll_wait_seconds`` is 0 (no polling)."""
    if poll_wait_seconds <= 0:
        return None
    return VersionPoller(manager, poll_wait_seconds).start()
