"""The template's functions as the local Lambda runs them: :class:`TemplateFunctions` makes a
:class:`~chatstream_local.lambda_.function_spec.FunctionSpec` of each ``AWS::Serverless::Function`` of template.yaml.

A function's settings are its properties merged over ``Globals.Function``, as SAM merges them
(:meth:`~chatstream_local.template.Template.function_settings`). From them: the handler, timeout, memory, the
environment (with the local endpoints the stack gives, then a caller's overrides), its code and its layers' (the source
tree's ``CodeUri``/``ContentUri``, or what ``sam build`` wrote), the runtime (the streaming layer's exec wrapper, or
awslambdaric), the asynchronous invocation settings (``EventInvokeConfig``), the reserved concurrency, and the process
priority (a function an event source mapping invokes runs at ``SHARED_FUNCTION_NICE``). Every function runs on the
deployed site's interpreter (:mod:`~chatstream_local.lambda_.deployed_site`).

A function that cannot run locally is one :class:`FunctionSpecError` that says why: its build is missing, its exec
wrapper or a layer is unknown, or the template's parameters give it a configuration its cold start refuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from chatstream.config import ConsumerConfig, ProxyConfig, RelayConfig, TableConfig
from chatstream.errors import ConfigError
from chatstream_local.lambda_ import deployed_site
from chatstream_local.lambda_.function_spec import FUNCTION_NICE, SHARED_FUNCTION_NICE, FunctionSpec
from chatstream_local.template import REPO_ROOT

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from chatstream_local.template import Template

EXEC_WRAPPERS = {"/opt/bin/chatstream-streaming": REPO_ROOT / "layers/streaming-runtime/bin/chatstream-streaming"}
BUILD_DIR = REPO_ROOT / ".aws-sam" / "build"  # where `sam build` (make build) writes each function and layer
CodeSource = Literal["source", "build"]

# Each function's configuration class, read as its cold start reads it (functions/*/app.py).
_CONFIGURATIONS: dict[str, type[ProxyConfig | RelayConfig | ConsumerConfig | TableConfig]] = {
    "ProxyFunction": ProxyConfig,
    "RelayFunction": RelayConfig,
    "ConsumerFunction": ConsumerConfig,
    "TurnReaperFunction": TableConfig,
}


class FunctionSpecError(ValueError):
    """A function of the template cannot run locally. Its message is one line that says why."""


class TemplateFunctions:
    """Every function of ``template`` as the local Lambda runs it, from the source tree (``code="source"``) or from
    what ``sam build`` wrote to ``build_dir`` (``code="build"``)."""

    def __init__(self, template: Template, *, code: CodeSource = "source", build_dir: Path = BUILD_DIR) -> None:
        self.template = template
        self.code = code
        self.build_dir = build_dir

    def specs(
        self,
        endpoints: Mapping[str, str],
        overrides: Mapping[str, Mapping[str, str]] | None = None,
        *,
        local: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[FunctionSpec]:
        """Each function's spec. ``endpoints``: the variables that point every function at the local services
        (added to the template's environment); ``local``: variables by logical id that the local stack sets in place
        of the template's (the local issuer's, for the relay), checked with them; ``overrides``: variables by logical
        id, added last (tests and tools)."""
        overrides = overrides or {}
        local = local or {}
        specs = []
        try:
            python = deployed_site.interpreter()  # only the packages a deployed function has (deployed_site.py)
        except deployed_site.SiteError as err:
            raise FunctionSpecError(str(err)) from None
        for logical_id in self.template.resources_of_type("AWS::Serverless::Function"):
            settings = self.template.function_settings(logical_id)
            env = dict(settings["Environment"]["Variables"])
            wrapper_path = env.pop("AWS_LAMBDA_EXEC_WRAPPER", None)
            if wrapper_path and wrapper_path not in EXEC_WRAPPERS:
                raise FunctionSpecError(f"{logical_id}: unknown exec wrapper {wrapper_path}")
            env.update(endpoints)
            env.update(local.get(logical_id, {}))
            _check_configuration(logical_id, env)  # the template's parameters; a test may break a function on purpose
            env.update(overrides.get(logical_id, {}))  # last: tests and tools win
            code_dirs, exec_wrapper = self.code_of(logical_id, wrapper_path)
            invoke_config = settings.get("EventInvokeConfig", {})
            reserved = settings.get("ReservedConcurrentExecutions")
            specs.append(
                FunctionSpec(
                    name=self.template.physical_name(logical_id),
                    handler=settings["Handler"],
                    code_dirs=code_dirs,
                    environment=env,
                    timeout_s=float(settings.get("Timeout", 3)),
                    memory_mb=int(settings.get("MemorySize", 128)),
                    runtime="streaming" if exec_wrapper else "awslambdaric",
                    exec_wrapper=exec_wrapper,
                    max_retry_attempts=int(invoke_config.get("MaximumRetryAttempts", 2)),
                    max_event_age_s=float(invoke_config.get("MaximumEventAgeInSeconds", 21_600)),
                    max_concurrency=100,
                    reserved_concurrency=None if reserved is None else int(reserved),
                    nice=SHARED_FUNCTION_NICE if _mapped(settings) else FUNCTION_NICE,
                    python=python,
                )
            )
        return specs

    def code_of(self, logical_id: str, wrapper_path: str | None = None) -> tuple[list[Path], Path | None]:
        """A function's code directories (its own first, then its layers') and its exec wrapper, from the source
        tree or, with ``code="build"``, from what ``sam build`` wrote (a layer's Python code in ``python/``)."""
        settings = self.template.function_settings(logical_id)
        layer_ids = [self._layer_logical_id(layer) for layer in settings.get("Layers", [])]
        if self.code == "build":
            built = self.build_dir
            for needed in (logical_id, *layer_ids):
                if not (built / needed).is_dir():
                    raise FunctionSpecError(f"{built / needed} is missing: run `make build` (sam build) first")
            code_dirs = [built / logical_id, *(built / layer_id / "python" for layer_id in layer_ids)]
            wrapper = built / "StreamingRuntimeLayer" / wrapper_path.removeprefix("/opt/") if wrapper_path else None
            return code_dirs, wrapper
        code_dirs = [REPO_ROOT / settings["CodeUri"]]
        for layer_id in layer_ids:
            code_dirs.append(REPO_ROOT / self.template.resource(layer_id)["Properties"]["ContentUri"])
        return code_dirs, EXEC_WRAPPERS[wrapper_path] if wrapper_path else None

    def _layer_logical_id(self, layer: Any) -> str:
        # Layers are resolved by the template reader to their version's ARN; map them back to logical ids.
        template = self.template
        for logical_id in template.resources_of_type("AWS::Serverless::LayerVersion"):
            if layer in (logical_id, template.physical_name(logical_id), template.arn(logical_id)):
                return logical_id
        raise FunctionSpecError(f"layer {layer!r} is not a layer of template.yaml")


def _mapped(settings: dict[str, Any]) -> bool:
    """Whether an event source mapping (Kinesis, SQS) invokes the function: few environments serve all."""
    return any(event.get("Type") in ("Kinesis", "SQS") for event in settings.get("Events", {}).values())


def _check_configuration(logical_id: str, env: dict[str, str]) -> None:
    """A parameter CloudFormation accepts but the function refuses (a ``ModelRequestFields`` that is not JSON, a
    ``TtlDays`` of 1.5) stops the stack in one line, rather than failing every cold start of that function."""
    configuration = _CONFIGURATIONS.get(logical_id)
    if configuration is None:
        return
    try:
        configuration.from_env(env)
    except ConfigError as err:
        raise FunctionSpecError(
            f"{logical_id} would fail every cold start: {err} (check the template parameters you gave)"
        ) from None
