"""Locust load for tests that drive a real front (the local runtime's HAProxy, the real
node's Gateway): `Load` runs servectl.loadtest.runner in a thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from servectl.loadtest import runner


class Load:
    """A Locust run (``servectl.loadtest.runner``) in a thread: a ``t,rps`` trace against a
    service's REST front port, stopped early with :meth:`finish`."""

    def __init__(
        self,
        out: Path,
        port: int,
        trace: list[tuple[float, float]],
        name: str,
        model: str = "cost_model",
    ):
        out.mkdir(parents=True, exist_ok=True)
        trace_file = out / f"{name}.csv"
        trace_file.write_text("t,rps\n" + "".join(f"{t:g},{r:g}\n" for t, r in trace))
        self.config = runner.LoadTestConfig(
            target=f"http://127.0.0.1:{port}",
            shape="trace",
            trace=trace_file,
            duration_s=None,
            out_dir=out,
            name=name,
            model=model,
        )
        self.stop = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = runner.run(self.config, stop=self.stop)
        except BaseException as exc:
            self.error = exc

    def abandon(self) -> None:
        """Stop it after a failure elsewhere, without raising over that failure."""
        self.stop.set()
        self.thread.join(timeout=60)

    def finish(self) -> Any:
        """Stop it; the Locust summary (``.total.requests``, ``.failures`` ...)."""
        self.stop.set()
        self.thread.join(timeout=60)
        if self.error is not None:
            raise self.error
        assert self.result is not None, "the load test did not finish"
        return self.result.summary
