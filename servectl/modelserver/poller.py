"""Background polling: new version directories, and a changed ``--model_config_file``.

- ``--file_system_poll_wait_seconds`` (TF Serving's flag, default 1): the wait between two
  looks at every model's base path (:meth:`ModelManager.refresh`); 0 turns it off after
  start-up.
- ``--model_config_file_poll_wait_seconds`` (default 0, off): the wait between two reads
  of the model config file. A changed file is parsed and applied with
  :meth:`ModelManager.reconfigure` (new models, policies, label moves). A file that does
  not parse or does not apply is logged and the server keeps serving the last good
  config; it is tried again only once its text changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from servectl.modelserver.config import parse_model_config_text
from servectl.modelserver.errors import ServingError
from servectl.modelserver.models import ModelManager

log = logging.getLogger(__name__)


class Poller:
    """Calls ``tick`` every ``interval_s`` seconds in a thread until :meth:`stop`."""

    def __init__(self, tick: Callable[[], object], interval_s: float, name: str) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.tick = tick
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop polling; waits for a tick in progress (a load) to finish."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # keep polling: one bad look must not stop hot loading
                log.exception("Polling (%s) failed", self._thread.name)


class ConfigFileWatcher:
    """Applies ``path`` to ``manager`` whenever its text changes (one call per change)."""

    def __init__(self, manager: ModelManager, path: str, applied_text: str) -> None:
        self.manager = manager
        self.path = Path(path)
        self._last_text = applied_text

    def check(self) -> bool:
        """Read the file; apply it if changed. True when a new config was applied."""
        try:
            text = self.path.read_text()
        except OSError as exc:
            log.error(
                "Cannot read model config file %s: %s; keeping the current config", self.path, exc
            )
            return False
        if text == self._last_text:
            return False
        self._last_text = text  # a bad text is reported once, not at every poll
        try:
            configs = parse_model_config_text(
                text, origin=f"base_path in --model_config_file={self.path}"
            )
            self.manager.reconfigure(configs)
        except ServingError as exc:
            log.error(
                "Model config file %s not applied (%s: %s); still serving the last good config",
                self.path,
                exc.code,
                exc.message,
            )
            return False
        log.info("Applied model config file %s: %s", self.path, ", ".join(c.name for c in configs))
        return True


def start_poller(manager: ModelManager, poll_wait_seconds: float) -> Poller | None:
    """A started version poller, or None when ``poll_wait_seconds`` is 0 (no polling)."""
    if poll_wait_seconds <= 0:
        return None
    return Poller(manager.refresh, poll_wait_seconds, "version-poller").start()


def start_config_poller(
    manager: ModelManager, path: str, applied_text: str, poll_wait_seconds: float
) -> Poller | None:
    """A started config file poller, or None when off (``poll_wait_seconds`` 0 or no file)."""
    if poll_wait_seconds <= 0 or not path:
        return None
    watcher = ConfigFileWatcher(manager, path, applied_text)
    return Poller(watcher.check, poll_wait_seconds, "config-poller").start()
