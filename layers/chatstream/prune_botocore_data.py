"""Prune an installed botocore's ``data`` folder to the services the functions call (a build step, not shipped).

``python3 prune_botocore_data.py <site-packages>/botocore/data``

botocore ships the models of ~430 services (27 MB). Building a session's first client costs, once per execution
environment, a listing of every service folder (``Loader.list_available_services``, to check the name, once per
model type) and parsing ``endpoints.json`` (1.2 MB, every service's endpoints in every partition), which the client's
endpoint bridge reads beside the service's rule set. The functions build clients for six services only, so the layer
keeps those (:data:`SERVICES`) and botocore's own files, and ``endpoints.json`` keeps every partition and region but
only the kept services' entries: what botocore reads for them is byte-for-byte the same data, so the clients behave
as before. A client for any other service fails with botocore's ``UnknownServiceError``.

Each kept service model (``service-2.json.gz``, ~0.5 MB of JSON for DynamoDB and Lambda, four fifths of it prose) is
then written uncompressed, compact, without its ``documentation`` strings (the service's, each operation's, shape's
and member's): botocore reads them only to build docstrings and help, lazily, and a client's init parses the whole
file (~2 ms less per client: no gunzip, a fifth of the text; bench/README.md, "Where init goes"). Every other key,
``clientContextParams``' own ``documentation`` included (botocore indexes it), stays as it was.

The models of the services the functions call keep only the operations they call (:data:`OPERATIONS`) and the shapes
those reach: a client's class gets a method per operation of its model (Lambda's has 88), which is most of what
building it costs beyond parsing (~4 ms less for Lambda's client, ~2 ms for DynamoDB's). The local stack's functions
load the same trimmed models (``chatstream_local.botocore_models``, through botocore's ``AWS_DATA_PATH``), so every
test that runs them fails if a function calls an operation that is not kept.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path
from typing import Any

# Every service a function builds a client for (functions/*/app.py), and STS, SSO and SSO OIDC, which botocore's
# credential chain builds clients for when a profile asks (never on Lambda, where credentials are variables).
SERVICES = frozenset({"dynamodb", "kinesis", "lambda", "bedrock-runtime", "sqs", "ssm", "sts", "sso", "sso-oidc"})
# The operations the functions call (functions/*/app.py, through the chatstream package's adapters): their models keep
# these only. The credential chain's services keep their whole models.
OPERATIONS: dict[str, frozenset[str]] = {
    "dynamodb": frozenset(
        {"BatchGetItem", "BatchWriteItem", "GetItem", "PutItem", "Query", "TransactWriteItems", "UpdateItem"}
    ),
    "kinesis": frozenset({"PutRecords"}),
    "lambda": frozenset({"Invoke"}),
    "bedrock-runtime": frozenset({"ConverseStream"}),
    "sqs": frozenset({"SendMessage"}),
    "ssm": frozenset({"GetParameter"}),  # the relay, under AUTH_TYPE=JWT with the template's user pool
}


def _endpoint_prefixes(data: Path, service: str) -> set[str]:
    """The names ``endpoints.json`` may key ``service`` by: its folder name and each model's ``endpointPrefix``."""
    names = {service}
    for model in (data / service).glob("*/service-2.json*"):
        opener = gzip.open if model.suffix == ".gz" else open
        with opener(model, "rt", encoding="utf-8") as file:
            names.add(json.load(file)["metadata"]["endpointPrefix"])
    return names


def strip_documentation(model: dict[str, Any]) -> dict[str, Any]:
    """A service model without the ``documentation`` of the service, its operations, shapes and shapes' members."""
    model = {k: v for k, v in model.items() if k != "documentation"}
    model["operations"] = {name: _undocumented(op) for name, op in model.get("operations", {}).items()}
    shapes = {}
    for name, shape in model.get("shapes", {}).items():
        shape = _undocumented(shape)
        if "members" in shape:
            shape["members"] = {member: _undocumented(spec) for member, spec in shape["members"].items()}
        shapes[name] = shape
    model["shapes"] = shapes
    return model


def keep_operations(model: dict[str, Any], operations: frozenset[str]) -> dict[str, Any]:
    """A service model with only ``operations`` and the shapes they reach (input, output, errors, and every shape
    those name, transitively)."""
    missing = sorted(operations - model["operations"].keys())
    if missing:
        raise SystemExit(f"prune_botocore_data: {model['metadata']['endpointPrefix']} has no {', '.join(missing)}")
    kept = {name: op for name, op in model["operations"].items() if name in operations}
    reached: set[str] = set()
    pending = [ref["shape"] for op in kept.values() for ref in (op.get("input"), op.get("output")) if ref]
    pending += [error["shape"] for op in kept.values() for error in op.get("errors", ())]
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        shape = model["shapes"][name]
        pending += [shape[key]["shape"] for key in ("member", "key", "value") if key in shape]
        pending += [member["shape"] for member in shape.get("members", {}).values()]
    return {**model, "operations": kept, "shapes": {n: s for n, s in model["shapes"].items() if n in reached}}


def layer_model(service: str, model: dict[str, Any]) -> dict[str, Any]:
    """The model the layer ships for ``service``: without documentation, and only the operations the functions call."""
    model = strip_documentation(model)
    operations = OPERATIONS.get(service)
    return model if operations is None else keep_operations(model, operations)


def _undocumented(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "documentation"}


def _rewrite_service_models(data: Path) -> None:
    """Each kept ``service-2.json[.gz]`` as compact, uncompressed ``service-2.json`` without documentation."""
    for service in sorted(SERVICES):
        models = sorted((data / service).glob("*/service-2.json*"))
        if service in OPERATIONS:  # botocore loads the newest API version; older ones lack operations kept here
            for old_version in {model.parent for model in models[:-1]} - {models[-1].parent}:
                shutil.rmtree(old_version)
            models = models[-1:]
        for model_file in models:
            opener = gzip.open if model_file.suffix == ".gz" else open
            with opener(model_file, "rt", encoding="utf-8") as file:
                model = json.load(file)
            model_file.unlink()
            target = model_file.with_name("service-2.json")
            target.write_text(json.dumps(layer_model(service, model), separators=(",", ":")) + "\n", encoding="utf-8")


def prune(data: Path) -> None:
    """Remove every service folder but :data:`SERVICES`' from ``data`` and their entries from ``endpoints.json``; the
    kept services' models without documentation."""
    missing = sorted(s for s in SERVICES if not (data / s).is_dir())
    if missing:
        raise SystemExit(f"prune_botocore_data: {data} has no model for {', '.join(missing)}")
    for entry in data.iterdir():
        if entry.is_dir() and entry.name not in SERVICES:
            shutil.rmtree(entry)
    keep = set().union(*(_endpoint_prefixes(data, s) for s in SERVICES))
    endpoints_file = data / "endpoints.json"
    endpoints = json.loads(endpoints_file.read_text(encoding="utf-8"))
    for partition in endpoints["partitions"]:
        partition["services"] = {k: v for k, v in partition["services"].items() if k in keep}
    endpoints_file.write_text(json.dumps(endpoints, separators=(",", ":")) + "\n", encoding="utf-8")
    _rewrite_service_models(data)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 prune_botocore_data.py <site-packages>/botocore/data")
    prune(Path(sys.argv[1]))
