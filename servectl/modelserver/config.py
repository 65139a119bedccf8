"""What the server is told to serve: models, their version policies and labels.

:class:`ModelConfig` is one entry of TF Serving's ``ModelServerConfig``
(``--model_config_file``, ``HandleReloadConfigRequest``), or the model that
``--model_name`` / ``--model_base_path`` name; :func:`parse_model_config_text` reads the
text proto with TF Serving's errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from servectl.modelserver.errors import invalid_argument


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
