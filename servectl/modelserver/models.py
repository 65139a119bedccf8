"""Model loading and serving: one :class:`ModelManager` that every front end calls.

The manager knows models by name, their loaded versions (chosen by a version
policy) and version labels. It speaks tensors (numpy arrays), not JSON or protos:
the REST front end (``rest.py``) and, next, the gRPC one convert their wire
formats to and from arrays and call :meth:`ModelManager.predict`,
:meth:`ModelManager.classify` and :meth:`ModelManager.regress`.

Errors are :class:`~servectl.modelserver.errors.ServingError` with TF Serving's
codes and messages, so both front ends report them the way TF Serving does.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from servectl.modelserver.errors import (
    ServingError,
    failed_precondition,
    invalid_argument,
    not_found,
)

if TYPE_CHECKING:
    from servectl.modelserver.batching import Batcher

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
SERVE_TAG = "serve"


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions under a base path are served: TF Serving's ServableVersionPolicy."""

    kind: str = "latest"  # "latest" | "all" | "specific"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def choose(self, available: Sequence[int]) -> list[int]:
        ordered = sorted(set(available))
        if self.kind == "all":
            return ordered
        if self.kind == "specific":
            return [v for v in ordered if v in self.versions]
        if self.kind == "latest":
            return ordered[-max(self.num_versions, 1) :] if ordered else []
        raise ValueError(f"unknown version policy {self.kind!r}")


@dataclass(frozen=True)
class ModelConfig:
    """One model: its name, base path (numbered version dirs), policy and labels.

    ``origin`` names where ``base_path`` was set (a flag, or a config file's field), for
    errors; it is not part of the config's identity.
    """

    name: str
    base_path: str
    policy: VersionPolicy = field(default_factory=VersionPolicy)
    labels: Mapping[str, int] = field(default_factory=dict)
    origin: str = field(default="base_path", compare=False)


def parse_model_config_text(text: str, origin: str = "base_path") -> list[ModelConfig]:
    """Parse a text-proto ModelServerConfig (``--model_config_file``).

    ``origin`` says where the text came from, for errors about a base path (e.g.
    ``base_path in --model_config_file=/models/models.config``).
    """
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise invalid_argument(f"Invalid ModelServerConfig text proto: {exc}") from exc
    if config.WhichOneof("config") == "custom_model_config":
        raise invalid_argument("custom_model_config is not supported; use model_config_list")
    out: list[ModelConfig] = []
    for m in config.model_config_list.config:
        if m.model_platform not in ("", "tensorflow"):
            raise invalid_argument(
                f"Model {m.name}: unsupported model_platform {m.model_platform!r}"
            )
        which = m.model_version_policy.WhichOneof("policy_choice")
        if which == "all":
            policy = VersionPolicy("all")
        elif which == "specific":
            policy = VersionPolicy(
                "specific", versions=tuple(m.model_version_policy.specific.versions)
            )
        elif which == "latest":
            policy = VersionPolicy(
                "latest", num_versions=m.model_version_policy.latest.num_versions
            )
        else:
            policy = VersionPolicy()
        out.append(
            ModelConfig(
                name=m.name,
                base_path=m.base_path,
                policy=policy,
                labels=dict(m.version_labels),
                origin=origin,
            )
        )
    names = [c.name for c in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise invalid_argument(f"Illegal to list model {dupes[0]} multiple times in config list")
    return out


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


# --------------------------------------------------------------------------- servables


@dataclass(frozen=True)
class TensorSpecInfo:
    """One signature input or output: its key, dtype and (partially known) shape."""

    key: str
    dtype: Any  # tf.DType
    shape: tuple[int | None, ...] | None  # None: unknown rank

    @property
    def dtype_name(self) -> str:
        return str(self.dtype.name)


@dataclass(frozen=True)
class Signature:
    name: str
    method_name: str
    inputs: Mapping[str, TensorSpecInfo]
    outputs: Mapping[str, TensorSpecInfo]
    function: Any  # a tf ConcreteFunction


@dataclass
class Servable:
    """One loaded version of one model."""

    name: str
    version: int
    path: str
    signatures: dict[str, Signature]
    signature_def_map: Any  # tensorflow_serving.apis.get_model_metadata_pb2.SignatureDefMap
    loaded: Any  # keeps the tf object (and its variables) alive

    def signature(self, name: str) -> Signature:
        key = name or DEFAULT_SIGNATURE
        sig = self.signatures.get(key)
        if sig is None:
            raise invalid_argument(f'Serving signature name: "{key}" not found in signature def')
        return sig


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
        from servectl.modelserver.warmup import replay_warmup

        replay_warmup(servable)
    return servable


# --------------------------------------------------------------------------- manager


@dataclass(frozen=True)
class ModelSpec:
    """What a request names: a model, optionally a version or a label, and a signature."""

    name: str
    version: int | None = None
    label: str | None = None
    signature_name: str = ""

    def describe(self) -> str:
        if self.version is not None:
            return f"Specific({self.name}, {self.version})"
        return f"Latest({self.name})"


@dataclass(frozen=True)
class VersionStatus:
    version: int
    state: str  # TF Serving ModelVersionStatus.State name: AVAILABLE, LOADING, END, ...
    error_code: str = "OK"
    error_message: str = ""


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


# Canonical code names by number (absl / gRPC), for load errors raised by TensorFlow.
_CODE_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def _load_error_status(version: int, exc: BaseException) -> VersionStatus:
    if isinstance(exc, ServingError):
        code, message = exc.code, exc.message
    else:
        number = getattr(exc, "error_code", None)
        ok = isinstance(number, int) and 0 < number < len(_CODE_NAMES)
        code = _CODE_NAMES[number] if ok else "UNKNOWN"  # type: ignore[index]
        message = str(getattr(exc, "message", "") or exc)
    return VersionStatus(version, "END", code, message)


class ModelManager:
    """Loaded models by name, with TF Serving's lookup rules and error messages.

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

    @classmethod
    def serving_only(cls, servable: Servable) -> ModelManager:
        """A manager serving just ``servable`` (as its model's only version): for warmup."""
        manager = cls(warmup=False)
        config = ModelConfig(servable.name, os.path.dirname(servable.path))
        manager._models = {servable.name: _Model(config, {servable.version: servable}, {})}
        return manager

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

    # ----------------------------------------------------------------- inference

    def _run(
        self, servable: Servable, sig: Signature, inputs: Mapping[str, np.ndarray[Any, Any]]
    ) -> dict[str, np.ndarray[Any, Any]]:
        # One batching queue per loaded servable and signature (id: a reload that loads
        # the same version number again gets a new queue).
        key = (servable.name, servable.version, sig.name, id(servable))
        return run_signature(sig, inputs, self.batcher, key)

    def predict(
        self, spec: ModelSpec, inputs: Mapping[str, np.ndarray[Any, Any]]
    ) -> tuple[Servable, dict[str, np.ndarray[Any, Any]]]:
        """Run a signature on named input arrays; returns the servable used and the outputs."""
        servable = self.resolve(spec)
        sig = servable.signature(spec.signature_name)
        return servable, self._run(servable, sig, inputs)

    def _example_signature(
        self, spec: ModelSpec, method: str, kind: str
    ) -> tuple[Servable, Signature]:
        """The servable and signature of a classify / regress request, of that method."""
        servable = self.resolve(spec)
        sig = servable.signature(spec.signature_name)
        if sig.method_name != method:
            raise invalid_argument(
                f"Expected {kind} signature method_name to be {method}. Was: {sig.method_name}"
            )
        return servable, sig

    def classify(
        self, spec: ModelSpec, examples: Sequence[bytes]
    ) -> tuple[Servable, np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None]:
        """Classify serialized tf.Examples: (servable, classes [N,K] or None, scores or None)."""
        servable, sig = self._example_signature(spec, CLASSIFY_METHOD, "classification")
        if "classes" not in sig.outputs and "scores" not in sig.outputs:
            raise invalid_argument(
                "Expected classification signature outputs to contain classes or scores."
            )
        out = self._run(servable, sig, {_single_input(sig): _examples_tensor(examples)})
        classes = out.get("classes")
        scores = out.get("scores")
        return servable, classes, scores

    def regress(
        self, spec: ModelSpec, examples: Sequence[bytes]
    ) -> tuple[Servable, np.ndarray[Any, Any]]:
        """Regress serialized tf.Examples: (servable, one value per example)."""
        servable, sig = self._example_signature(spec, REGRESS_METHOD, "regression")
        if "outputs" not in sig.outputs:
            raise invalid_argument("No output tensor named outputs in regression signature.")
        out = self._run(servable, sig, {_single_input(sig): _examples_tensor(examples)})
        values = np.asarray(out["outputs"])
        if values.ndim == 2 and values.shape[1] == 1:
            values = values.reshape(-1)
        if values.ndim != 1 or values.shape[0] != len(examples):
            raise invalid_argument(
                f"Expected output Tensor shape to be [{len(examples)}] or "
                f"[{len(examples)}, 1] but got {list(np.asarray(out['outputs']).shape)}"
            )
        return servable, values


def _single_input(sig: Signature) -> str:
    if len(sig.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    (key,) = sig.inputs
    return key


def _examples_tensor(examples: Sequence[bytes]) -> np.ndarray[Any, Any]:
    if not examples:
        raise invalid_argument("Input is empty.")
    return np.array(list(examples), dtype=object)


def run_signature(
    sig: Signature,
    inputs: Mapping[str, np.ndarray[Any, Any]],
    batcher: Batcher | None = None,
    key: Hashable = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """Check inputs against the signature, call it, and return outputs as numpy arrays.

    With a ``batcher`` (``--enable_batching``), the checked inputs join the queue named
    ``key`` and run merged with other requests' (docs/batching.md); each request is
    checked on its own first, so one bad request never fails its batch.
    """
    import tensorflow as tf

    tensors = _checked_tensors(sig, inputs)
    if batcher is None:
        return _call_signature(sig, tensors)
    arrays = {k: np.asarray(t.numpy()) for k, t in tensors.items()}

    def call(merged: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        return _call_signature(
            sig, {k: tf.convert_to_tensor(v, dtype=sig.inputs[k].dtype) for k, v in merged.items()}
        )

    return batcher.run(key, arrays, call)


def _checked_tensors(sig: Signature, inputs: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """The request's inputs as tensors of the signature's dtypes, or INVALID_ARGUMENT."""
    import tensorflow as tf

    missing = sorted(set(sig.inputs) - set(inputs))
    if missing:
        raise invalid_argument(
            f"Request inputs do not match required inputs for signature: {sig.name}. "
            f"Missing: {missing}"
        )
    extra = sorted(set(inputs) - set(sig.inputs))
    if extra:
        raise invalid_argument(
            f"Request inputs do not match required inputs for signature: {sig.name}. "
            f"Unexpected: {extra}"
        )
    tensors: dict[str, Any] = {}
    for key, spec in sig.inputs.items():
        arr = inputs[key]
        if spec.shape is not None:
            ok = len(spec.shape) == arr.ndim and all(
                d is None or d == n for d, n in zip(spec.shape, arr.shape, strict=True)
            )
            if not ok:
                want = [-1 if d is None else d for d in spec.shape]
                raise invalid_argument(
                    f"Input {key}: shape {list(arr.shape)} is not compatible with the "
                    f"signature's shape {want}"
                )
        try:
            tensors[key] = tf.convert_to_tensor(arr, dtype=spec.dtype)
        except (TypeError, ValueError) as exc:
            raise invalid_argument(f"Input {key}: {exc}") from exc
    return tensors


def _call_signature(sig: Signature, tensors: Mapping[str, Any]) -> dict[str, np.ndarray[Any, Any]]:
    import tensorflow as tf

    try:
        result = sig.function(**tensors)
    except tf.errors.InvalidArgumentError as exc:
        raise invalid_argument(exc.message) from exc
    except tf.errors.OpError as exc:
        raise ServingError("INTERNAL", exc.message) from exc
    return {k: np.asarray(v.numpy()) for k, v in result.items()}


def classification_2d(arr: np.ndarray[Any, Any], n: int) -> np.ndarray[Any, Any]:
    """A classify output as [n, num_classes] (a vector is one class per example)."""
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise invalid_argument(
            f"Expected classification output shape [{n}, num_classes], got {list(arr.shape)}"
        )
    return arr


def _labelled_version(model: Any, spec: ModelSpec) -> int | None:
    """The version a request names, its label resolved (TF Serving: INVALID_ARGUMENT)."""
    if spec.label is None:
        return spec.version
    if model is None or spec.label not in model.labels:
        raise invalid_argument(f"Unrecognized servable version label: {spec.label}")
    return int(model.labels[spec.label])
