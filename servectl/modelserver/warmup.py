"""SavedModel warmup: replay ``assets.extra/tf_serving_warmup_requests`` at load time.

TF Serving reads that file (a TFRecord of ``tensorflow.serving.PredictionLog``) when it
loads a version and runs every request once against the new version before the version
becomes AVAILABLE, so lazy initialisation (graph tracing, kernel choice) happens before
real traffic arrives. The same here: each record is run through the inference API the
caller passes in (the loader, :func:`~servectl.modelserver.models.load_servable`, passes
a :class:`~servectl.modelserver.inference.PredictionApi` over the new servable alone), so
warmup runs the code real requests run, whatever model name or version the record
names, and no transport. Any failing record fails the load, as in TF Serving (the
version goes to END with the error and the old one keeps serving). At most 1000
records, TF Serving's limit. Warmup calls are not counted in the request metrics.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Protocol

from servectl.modelserver.errors import ServingError, invalid_argument
from servectl.modelserver.inference import PredictionApi
from servectl.modelserver.servables import Servable, SingleServable

log = logging.getLogger(__name__)

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving's WarmupConsts::kMaxNumRecords


class WarmupApi(Protocol):
    """The calls a warmup record can make: request proto in, response proto out."""

    def predict(self, request: Any) -> Any: ...

    def classify(self, request: Any) -> Any: ...

    def regress(self, request: Any) -> Any: ...


def replay_warmup(servable: Servable, api: WarmupApi | None = None) -> int:
    """Run the servable's warmup records through ``api``; returns how many ran (0: no file).

    ``api`` must serve ``servable`` under its model name (each record is sent there, with
    no version); without one, a :class:`~servectl.modelserver.inference.PredictionApi`
    over ``servable`` alone, as the loader passes. Raises :class:`ServingError` (TF
    Serving's code and wording) when a record does not parse, names an unsupported
    request type, fails, or there are more than 1000.
    """
    path = Path(servable.path) / WARMUP_FILE
    if not path.exists():
        log.info("No warmup data file found at %s", path)
        return 0
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    if api is None:
        api = PredictionApi(SingleServable(servable))
    start = time.perf_counter()
    count = 0
    try:
        for raw in tf.data.TFRecordDataset(str(path)):
            count += 1
            if count > MAX_RECORDS:
                raise invalid_argument(
                    f"Number of warmup records exceeds the maximum ({MAX_RECORDS}) at {path}"
                )
            record = prediction_log_pb2.PredictionLog()
            try:
                record.ParseFromString(raw.numpy())
            except Exception as exc:  # protobuf's DecodeError
                raise invalid_argument(f"Failed to parse warmup record from {path}") from exc
            _run(api, servable, record)
    except tf.errors.DataLossError as exc:
        raise ServingError(
            "DATA_LOSS",
            f"{exc.message}. Please verify your warmup data is in TFRecord format.",
        ) from exc
    elapsed_us = int((time.perf_counter() - start) * 1e6)
    log.info(
        "Finished reading warmup data for model at %s. Number of warmup records read: %d. "
        "Elapsed time (microseconds): %d.",
        path,
        count,
        elapsed_us,
    )
    return count


def _run(api: WarmupApi, servable: Servable, record: Any) -> None:
    kind = record.WhichOneof("log_type")
    handlers = {
        "predict_log": api.predict,
        "classify_log": api.classify,
        "regress_log": api.regress,
    }
    handler = handlers.get(kind or "")
    if handler is None:
        raise invalid_argument(f"Unsupported log_type for warmup: {kind}")
    request = type(getattr(record, kind).request)()
    request.CopyFrom(getattr(record, kind).request)
    # The record's model name and version do not matter: it warms this servable.
    request.model_spec.name = servable.name
    request.model_spec.ClearField("version")
    request.model_spec.ClearField("version_label")
    handler(request)
