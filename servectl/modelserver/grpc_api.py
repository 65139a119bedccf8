"""TF Serving's gRPC transport over the inference API (``inference.py``).

Two services, with the stubs of ``tensorflow-serving-api``, each RPC handed to the
transport-free API:

- ``tensorflow.serving.PredictionService`` -> :class:`~servectl.modelserver.inference.PredictionApi`
  (``Predict``, ``Classify``, ``Regress``, ``GetModelMetadata``);
- ``tensorflow.serving.ModelService`` -> :class:`~servectl.modelserver.inference.ModelApi`
  (``GetModelStatus``, ``HandleReloadConfigRequest``).

This module holds only what gRPC adds: a
:class:`~servectl.modelserver.errors.ServingError` aborts the RPC with the gRPC status
code of the same name and TF Serving's message (anything else with ``INTERNAL``), calls
are recorded in the request metrics (entrypoint ``GRPC``), and :class:`GrpcServer` runs
both services on one ``grpc.server``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, TypeVar

from servectl.modelserver.errors import DEFAULT_MAX_REQUEST_BYTES, ServingError
from servectl.modelserver.inference import ModelApi, PredictionApi
from servectl.modelserver.models import ModelManager
from servectl.modelserver.monitoring import (
    API_CLASSIFY,
    API_PREDICT,
    API_REGRESS,
    ENTRYPOINT_GRPC,
    ServingMetrics,
)

log = logging.getLogger(__name__)

# TF Serving sets its gRPC message size limits to INT_MAX; what a server receives is
# --max_request_bytes (the same default), what it sends stays at INT_MAX.
MAX_MESSAGE_BYTES = 2**31 - 1

_T = TypeVar("_T")


# --------------------------------------------------------------------------- errors


def _call(
    context: Any,
    name: str,
    fn: Callable[[], _T],
    *,
    metrics: ServingMetrics | None = None,
    model_name: str = "",
    api: str = "",
    served: Callable[[str], bool] = lambda name: True,
) -> _T:
    """Run one RPC body; a ServingError aborts with its code, anything else with INTERNAL.

    With ``metrics``, the call is recorded like a REST one (entrypoint ``GRPC``), so
    ``:tensorflow:serving:request_count`` and ``request_latency`` cover both front ends.
    """
    import grpc

    start = time.perf_counter_ns()
    code = "OK"
    try:
        return fn()
    except ServingError as exc:
        code = exc.code
        context.abort(getattr(grpc.StatusCode, exc.code), exc.message)
    except Exception as exc:  # a bug or a TF failure: report it, keep serving
        code = "INTERNAL"
        log.exception("Internal error in %s", name)
        context.abort(grpc.StatusCode.INTERNAL, f"Internal: {exc}")
    finally:
        if metrics is not None and model_name:
            latency_us = (time.perf_counter_ns() - start) / 1000
            metrics.record(
                model_name, api, ENTRYPOINT_GRPC, code, latency_us, served=served(model_name)
            )
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


# --------------------------------------------------------------------------- gRPC glue


def _servicers(manager: ModelManager, metrics: ServingMetrics | None = None) -> tuple[Any, Any]:
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    predictions = PredictionApi(manager)
    models = ModelApi(manager)

    def unary(name: str, handler: Callable[[Any], Any], api: str) -> Callable[..., Any]:
        """An RPC method: run ``handler`` on the request, recorded under ``api``."""

        def method(_self: Any, request: Any, context: Any) -> Any:
            return _call(
                context,
                name,
                lambda: handler(request),
                metrics=metrics,
                model_name=request.model_spec.name,
                api=api,
                served=lambda name: name in manager.model_names(),
            )

        return method

    class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):  # type: ignore[misc]
        Predict = unary("Predict", predictions.predict, API_PREDICT)
        Classify = unary("Classify", predictions.classify, API_CLASSIFY)
        Regress = unary("Regress", predictions.regress, API_REGRESS)

        # Not recorded, as in TF Serving (prediction_service_impl.cc): metadata is no
        # inference.
        def GetModelMetadata(self, request: Any, context: Any) -> Any:
            return _call(
                context, "GetModelMetadata", lambda: predictions.get_model_metadata(request)
            )

    class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):  # type: ignore[misc]
        def GetModelStatus(self, request: Any, context: Any) -> Any:
            return _call(context, "GetModelStatus", lambda: models.get_model_status(request))

        def HandleReloadConfigRequest(self, request: Any, context: Any) -> Any:
            def reload() -> Any:
                try:
                    return models.reload_config(request)
                except ServingError as exc:
                    log.error("ReloadConfig failed: %s", exc.message)
                    raise

            return _call(context, "HandleReloadConfigRequest", reload)

    return PredictionServicer(), ModelServicer()


class GrpcServer:
    """Both services on one ``grpc.server``; :meth:`stop` lets RPCs in flight finish."""

    def __init__(
        self,
        manager: ModelManager,
        host: str,
        port: int,
        max_workers: int = 16,
        metrics: ServingMetrics | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    ) -> None:
        """A message over ``max_request_bytes`` fails with gRPC's own RESOURCE_EXHAUSTED
        (``Received message larger than max (N vs. M)``) before any handler runs."""
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", max_request_bytes),
                # gRPC's default SO_REUSEPORT lets a second server bind a port that one
                # already serves, and clients then reach either at random: refuse instead.
                ("grpc.so_reuseport", 0),
            ],
        )
        prediction, model = _servicers(manager, metrics)
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            prediction, self._server
        )
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(model, self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6 in brackets
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises when it cannot bind
            raise OSError(f"Failed to bind gRPC server to {address}: {exc}") from exc
        if bound == 0:
            raise OSError(f"Failed to bind gRPC server to {address}")
        self.host = host
        self.port = int(bound)

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float | None = 30.0) -> Any:
        """Refuse new RPCs, let those in flight finish for up to ``grace`` s; returns an Event."""
        return self._server.stop(grace)


def serve_grpc(manager: ModelManager, host: str, port: int, **kwargs: Any) -> GrpcServer:
    """Start a :class:`GrpcServer` (its own threads) and return it."""
    server = GrpcServer(manager, host, port, **kwargs)
    server.start()
    return server


__all__: Sequence[str] = [
    "GrpcServer",
    "serve_grpc",
]
