"""Model loading: one :class:`ModelManager` that every front end serves from.

The manager knows models by name, their loaded versions (chosen by a version policy)
and version labels; it loads new versions as they appear and moves to a new model list
on a config reload. Requests reach it through the transport-free inference API
(``inference.py``, which the gRPC transport adapts) or the REST API (``rest_api.py``);
it runs them on numpy arrays, with the calls of
:class:`~servectl.modelserver.servables.Servables`.

A version is warmed up before it serves (``warmup.py``): its recorded requests run
through an inference API over that version alone, which :func:`load_servable` builds
and passes in.

Errors are :class:`~servectl.modelserver.errors.ServingError` with TF Serving's codes
and messages, so both front ends report them the way TF Serving does.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servectl.modelserver import inference
from servectl.modelserver.config import ModelConfig, VersionPolicy, parse_model_config_text
from servectl.modelserver.errors import (
    ServingError,
    code_name,
    failed_precondition,
    invalid_argument,
    not_found,
)
from servectl.modelserver.servables import (
    PREDICT_METHOD,
    ModelSpec,
    Servable,
    Servables,
    Signature,
    SingleServable,
    TensorSpecInfo,
    VersionStatus,
)
from servectl.modelserver.warmup import replay_warmup

if TYPE_CHECKING:
    from servectl.modelserver.batching import Batcher

log = logging.getLogger(__name__)

SERVE_TAG = "serve"


# --------------------------------------------------------------------------- model dirs


def _check_base_path(cfg: ModelConfig) -> None:
    """A base path that is missing or not a directory: TF Serving's INVALID_ARGUMENT
    ("Could not find base path ..."), naming where the path was set."""
    if not os.path.exists(cfg.base_path):
        raise invalid_argument(
            f"Could not find base path {cfg.base_path} for servable {cfg.name}: "
            f"no such directory (set by {cfg.origin})"
        )
    if not os.path.isdir(cfg.base_path):
        raise invalid_argument(
            f"Base path {cfg.base_path} for servable {cfg.name} is not a directory "
            f"(set by {cfg.origin})"
        )


def list_versions(base_path: str | os.PathLike[str]) -> list[int]:
    """Numbered subdirectories of ``base_path`` that hold a SavedModel."""
    base = Path(base_path)
    if not base.is_dir():
        return []
    found = []
    for child in base.iterdir():
        if child.is_dir() and child.name.isdigit() and (child / "saved_model.pb").exists():
            found.append(int(child.name))
    return sorted(found)


# --------------------------------------------------------------------------- loading


def _shape_of(tensor_shape: Any) -> tuple[int | None, ...] | None:
    if tensor_shape.rank is None:
        return None
    return tuple(None if d is None else int(d) for d in tensor_shape.as_list())


def _read_meta_graph(path: Path) -> Any:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    for mg in saved.meta_graphs:
        if SERVE_TAG in mg.meta_info_def.tags:
            return mg
    raise failed_precondition(f"SavedModel at {path} has no MetaGraphDef with tag {SERVE_TAG!r}")


def load_servable(
    name: str, version: int, path: str | os.PathLike[str], *, warmup: bool = True
) -> Servable:
    """Load one SavedModel version with TensorFlow (``tags=["serve"]``), then warm it up.

    With ``warmup``, the version's ``assets.extra/tf_serving_warmup_requests`` are replayed
    (see ``warmup.py``); a failing record fails the load.
    """
    import tensorflow as tf
    from tensorflow_serving.apis import get_model_metadata_pb2

    p = Path(path)
    meta_graph = _read_meta_graph(p)
    loaded = tf.saved_model.load(str(p), tags=[SERVE_TAG])
    sig_map = get_model_metadata_pb2.SignatureDefMap()
    signatures: dict[str, Signature] = {}
    for sig_name, fn in loaded.signatures.items():
        sig_def = meta_graph.signature_def.get(sig_name)
        method = sig_def.method_name if sig_def is not None else PREDICT_METHOD
        if sig_def is not None:
            sig_map.signature_def[sig_name].CopyFrom(sig_def)
        _, kw_specs = fn.structured_input_signature
        inputs = {
            k: TensorSpecInfo(k, spec.dtype, _shape_of(spec.shape)) for k, spec in kw_specs.items()
        }
        outputs = {
            k: TensorSpecInfo(k, spec.dtype, _shape_of(spec.shape))
            for k, spec in fn.structured_outputs.items()
        }
        signatures[sig_name] = Signature(sig_name, method or PREDICT_METHOD, inputs, outputs, fn)
    servable = Servable(name, version, str(p), signatures, sig_map, loaded)
    if warmup:
        _warm_up(servable)
    return servable


def _warm_up(servable: Servable) -> int:
    """Replay ``servable``'s warmup records through the inference API over it alone.

    Unbatched and unrecorded, before the version joins its model; returns how many ran.
    """
    api = inference.PredictionApi(SingleServable(servable))
    return replay_warmup(servable, api)


# --------------------------------------------------------------------------- manager


@dataclass(frozen=True)
class _Model:
    """One model's serving state; replaced whole (never mutated) so readers need no lock.

    ``states`` holds the versions that are not AVAILABLE but known: LOADING, or END
    (unloaded, or failed to load with the error in the status), as TF Serving reports them.
    """

    config: ModelConfig
    servables: Mapping[int, Servable]
    labels: Mapping[str, int]
    states: Mapping[int, VersionStatus] = field(default_factory=dict)


def _load_error_status(version: int, exc: BaseException) -> VersionStatus:
    if isinstance(exc, ServingError):
        code, message = exc.code, exc.message
    else:
        code = code_name(getattr(exc, "error_code", None))  # TensorFlow's OpError
        message = str(getattr(exc, "message", "") or exc)
    return VersionStatus(version, "END", code, message)


class ModelManager(Servables):
    """Loaded models by name, with TF Serving's lookup rules and error messages.

    Requests resolve to a loaded version (:meth:`resolve`) and run with the calls of
    :class:`~servectl.modelserver.servables.Servables` (``predict``, ``classify``,
    ``regress``).

    Thread-safe: lookups take a lock only to read the current version map, and
    model calls run outside it, so a later reload can swap maps under traffic.
    """

    def __init__(self, *, warmup: bool = True, batcher: Batcher | None = None) -> None:
        self.warmup = warmup  # replay each version's warmup requests when it loads
        self.batcher = batcher  # --enable_batching: merge concurrent requests (batching.py)
        self._lock = threading.Lock()
        # Serialises reloads (config changes, polling) so two never interleave.
        self._reload_lock = threading.Lock()
        self._models: dict[str, _Model] = {}

    # ----------------------------------------------------------------- loading

    def load(self, configs: Sequence[ModelConfig]) -> None:
        """Load every model's chosen versions at start-up; raises on any failure."""
        self.reconfigure(configs)

    def reconfigure(self, configs: Sequence[ModelConfig]) -> None:
        """Move to a new model list (start-up, ``HandleReloadConfigRequest``, config polling).

        All or nothing: versions the new config wants are loaded first, outside the lock,
        while the current ones keep serving; then the new model map is swapped in at once.
        A version already loaded from the same base path is kept, not reloaded, so a label
        move or a policy change costs no load. Any failure (a model with no versions, a
        version that fails to load or warm up, a label on a version that is not loaded)
        raises and leaves what is served unchanged. Models missing from ``configs`` are
        unloaded.
        """
        with self._reload_lock:
            with self._lock:
                current = dict(self._models)
            new_models = {cfg.name: self._plan_model(cfg, current.get(cfg.name)) for cfg in configs}
            with self._lock:
                for name in sorted(set(current) - set(new_models)):
                    log.info("Unloading model %s (not in the new config)", name)
                self._models = new_models

    def _plan_model(self, cfg: ModelConfig, old: _Model | None) -> _Model:
        """``cfg``'s model, reusing ``old``'s servables from the same base path."""
        reusable = dict(old.servables) if old and old.config.base_path == cfg.base_path else {}
        _check_base_path(cfg)
        available = list_versions(cfg.base_path)
        chosen = cfg.policy.choose(available)
        if not chosen:
            raise not_found(
                f"No versions of servable {cfg.name} found under base path "
                f"{cfg.base_path}. Did you forget to name your leaf directory as a number "
                "(eg. '/1/')?"
            )
        if cfg.policy.kind == "specific":
            missing = sorted(set(cfg.policy.versions) - set(chosen))
            if missing:
                log.warning(
                    "Model %s: versions %s requested by the policy are not under %s",
                    cfg.name,
                    missing,
                    cfg.base_path,
                )
        for version in cfg.labels.values():
            if version not in chosen:
                raise failed_precondition(
                    f"Request to assign label to version {version} of model {cfg.name}, "
                    "which is not currently available for inference"
                )
        servables: dict[int, Servable] = {}
        for version in chosen:
            if version in reusable:
                servables[version] = reusable[version]
                continue
            path = os.path.join(cfg.base_path, str(version))
            log.info("Loading servable: {name: %s version: %d}", cfg.name, version)
            servables[version] = load_servable(cfg.name, version, path, warmup=self.warmup)
            log.info(
                "Successfully loaded servable version {name: %s version: %d}", cfg.name, version
            )
        states: dict[int, VersionStatus] = {}
        if old is not None and reusable:
            states = {v: s for v, s in old.states.items() if v not in servables}
            for version in sorted(set(old.servables) - set(servables)):
                log.info("Unloading servable version {name: %s version: %d}", cfg.name, version)
                states[version] = VersionStatus(version, "END")
        return _Model(cfg, servables, dict(cfg.labels), states)

    def refresh(self) -> None:
        """Re-read every model's base path and move to the versions its policy wants.

        New versions load outside the lock (their state is LOADING meanwhile) while the
        current ones keep serving. A version is swapped in only once loaded; versions the
        policy no longer wants are then unloaded (state END), but only when at least one
        wanted version is AVAILABLE, so a failed load (state END with the error) never
        leaves the model without a version. A version directory without
        ``saved_model.pb`` yet is not a version: the next refresh looks again. A version
        that failed is not retried while its directory stays; remove the directory (one
        refresh) and write it again to retry.
        """
        with self._reload_lock:
            for name in self.model_names():
                model = self._model(name)
                if model is not None:
                    self._refresh_model(model)

    def _refresh_model(self, model: _Model) -> None:
        cfg = model.config
        on_disk = list_versions(cfg.base_path)
        # A failed version is retried once its directory is gone (its error is then
        # forgotten) and comes back.
        errored = {v for v, s in model.states.items() if s.error_code != "OK"}
        if errored - set(on_disk):
            self._update(cfg.name, forget=errored - set(on_disk))
        failed = errored & set(on_disk)
        wanted = set(cfg.policy.choose([v for v in on_disk if v not in failed]))
        to_load = sorted(wanted - set(model.servables))
        if not to_load and set(model.servables) <= wanted:
            return
        if not wanted and model.servables:
            return  # nothing loadable on disk: keep serving what is loaded
        self._update(cfg.name, states={v: VersionStatus(v, "LOADING") for v in to_load})
        loaded: dict[int, Servable] = {}
        errors: dict[int, VersionStatus] = {}
        for version in to_load:
            path = os.path.join(cfg.base_path, str(version))
            log.info("Loading servable: {name: %s version: %d}", cfg.name, version)
            try:
                loaded[version] = load_servable(cfg.name, version, path, warmup=self.warmup)
            except Exception as exc:
                errors[version] = _load_error_status(version, exc)
                log.error(
                    "Loading servable: {name: %s version: %d} failed: %s",
                    cfg.name,
                    version,
                    errors[version].error_message,
                )
                continue
            log.info(
                "Successfully loaded servable version {name: %s version: %d}", cfg.name, version
            )
        if errors:  # the policy's choice among the versions that can serve
            failed |= set(errors)
            wanted = set(cfg.policy.choose([v for v in on_disk if v not in failed]))
        self._update(cfg.name, add=loaded, states=errors, wanted=wanted)

    def _update(
        self,
        name: str,
        *,
        add: Mapping[int, Servable] | None = None,
        states: Mapping[int, VersionStatus] | None = None,
        wanted: set[int] | None = None,
        forget: set[int] | None = None,
    ) -> None:
        """Swap in a new _Model for ``name``: new servables, state changes, unloads."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                return
            servables = {**model.servables, **(add or {})}
            new_states = {**model.states, **(states or {})}
            for version in {*(add or {}), *(forget or set())}:
                new_states.pop(version, None)
            if wanted is not None and wanted & set(servables):
                for version in sorted(set(servables) - wanted):
                    log.info("Unloading servable version {name: %s version: %d}", name, version)
                    del servables[version]
                    new_states[version] = VersionStatus(version, "END")
            self._models[name] = _Model(model.config, servables, model.labels, new_states)

    def model_names(self) -> list[str]:
        with self._lock:
            return sorted(self._models)

    # ----------------------------------------------------------------- lookup

    def _model(self, name: str) -> _Model | None:
        with self._lock:
            return self._models.get(name)

    def resolve(self, spec: ModelSpec) -> Servable:
        """The servable a request names, or TF Serving's NOT_FOUND / INVALID_ARGUMENT."""
        model = self._model(spec.name)
        version = _labelled_version(model, spec)
        if model is None or not model.servables:
            raise not_found(f"Servable not found for request: {spec.describe()}")
        if version is None:
            return model.servables[max(model.servables)]
        servable = model.servables.get(version)
        if servable is None:
            shown = ModelSpec(spec.name, version)
            raise not_found(f"Servable not found for request: {shown.describe()}")
        return servable

    def status(self, spec: ModelSpec) -> list[VersionStatus]:
        """GetModelStatus: every loaded version, or the one named by version/label."""
        if not spec.name:
            raise invalid_argument("Missing model name in request.")
        model = self._model(spec.name)
        version = _labelled_version(model, spec)
        if model is None:
            if version is not None:
                raise not_found(f"Could not find version {version} of model {spec.name}")
            raise not_found(f"Could not find any versions of model {spec.name}")
        known = {**model.states, **{v: VersionStatus(v, "AVAILABLE") for v in model.servables}}
        if version is not None:
            if version not in known:
                raise not_found(f"Could not find version {version} of model {spec.name}")
            return [known[version]]
        if not known:
            raise not_found(f"Could not find any versions of model {spec.name}")
        return [known[v] for v in sorted(known, reverse=True)]


def _labelled_version(model: Any, spec: ModelSpec) -> int | None:
    """The version a request names, its label resolved (TF Serving: INVALID_ARGUMENT)."""
    if spec.label is None:
        return spec.version
    if model is None or spec.label not in model.labels:
        raise invalid_argument(f"Unrecognized servable version label: {spec.label}")
    return int(model.labels[spec.label])


# Names of the model layer that callers import from here.
__all__ = [
    "ModelConfig",
    "ModelManager",
    "ModelSpec",
    "Servable",
    "Signature",
    "TensorSpecInfo",
    "VersionPolicy",
    "VersionStatus",
    "list_versions",
    "load_servable",
    "parse_model_config_text",
]
