"""Where the model comes from: environment variables, or a TOML config file, or neither (rule writer).

    FLEXAMEM_LLM_BASE_URL   e.g. http://127.0.0.1:8080/v1
    FLEXAMEM_LLM_MODEL      the endpoint's model name
    FLEXAMEM_LLM_API_KEY    optional; never printed
    FLEXAMEM_LLM_CACHE      response cache file (default ~/.cache/flexamem/llm-responses.sqlite; "off" disables)
    FLEXAMEM_CONFIG         a TOML file with an ``[llm]`` table of the same keys in lower case
                            (``base_url``, ``model``, ``api_key``, ``cache``, ``concurrency``, ``timeout``)

Environment variables win over the file, so a secret can stay out of it.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flexamem.errors import InvalidInputError
from flexamem.llm.client import OpenAICompatible

DEFAULT_CACHE = Path.home() / ".cache" / "flexamem" / "llm-responses.sqlite"


@dataclass(frozen=True)
class LLMConfig:
    """An endpoint and how to call it; ``repr`` never shows the key."""

    base_url: str
    model: str
    api_key: str | None = None
    cache: str | None = str(DEFAULT_CACHE)
    concurrency: int = 4
    timeout: float = 120.0

    def __repr__(self) -> str:
        return (
            f"LLMConfig(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key=<{'set' if self.api_key else 'none'}>, cache={self.cache!r})"
        )

    def client(self) -> OpenAICompatible:
        return OpenAICompatible(
            self.base_url,
            self.model,
            self.api_key,
            timeout=self.timeout,
            concurrency=self.concurrency,
            cache=self.cache,
        )


def load_config(env: Mapping[str, str] | None = None, path: str | Path | None = None) -> LLMConfig | None:
    """The configured endpoint, or ``None`` when neither the environment nor a file names one."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    file = path or env.get("FLEXAMEM_CONFIG")
    if file:
        try:
            data = tomllib.loads(Path(file).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInputError(f"cannot read config file {file}: {exc}") from None
        table = data.get("llm", {})
        if not isinstance(table, dict):
            raise InvalidInputError(f"{file}: [llm] must be a table")
        values.update(table)
    for key in ("base_url", "model", "api_key", "cache", "concurrency", "timeout"):
        value = env.get(f"FLEXAMEM_LLM_{key.upper()}")
        if value:
            values[key] = value
    if not values.get("base_url") and not values.get("model"):
        return None
    if not values.get("base_url") or not values.get("model"):
        raise InvalidInputError("an LLM needs both a base URL and a model name (FLEXAMEM_LLM_BASE_URL, _MODEL)")
    cache = values.get("cache", str(DEFAULT_CACHE))
    try:
        return LLMConfig(
            base_url=str(values["base_url"]),
            model=str(values["model"]),
            api_key=str(values["api_key"]) if values.get("api_key") else None,
            cache=None if str(cache).lower() in ("", "off", "none") else str(cache),
            concurrency=int(str(values.get("concurrency", 4))),
            timeout=float(str(values.get("timeout", 120.0))),
        )
    except ValueError as exc:
        raise InvalidInputError(f"bad LLM setting: {exc}") from None
