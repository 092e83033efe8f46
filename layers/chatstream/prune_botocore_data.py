"""Prune an installed botocore's ``data`` folder to the services the functions call (a build step, not shipped).

``python3 prune_botocore_data.py <site-packages>/botocore/data``

botocore ships the models of ~430 services (27 MB). Building a session's first client costs, once per execution
environment, a listing of every service folder (``Loader.list_available_services``, to check the name, once per
model type) and parsing ``endpoints.json`` (1.2 MB, every service's endpoints in every partition), which the client's
endpoint bridge reads beside the service's rule set. The functions build clients for five services only, so the layer
keeps those (:data:`SERVICES`) and botocore's own files, and ``endpoints.json`` keeps every partition and region but
only the kept services' entries: what botocore reads for them is byte-for-byte the same data, so the clients behave
as before. A client for any other service fails with botocore's ``UnknownServiceError``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

# Every service a function builds a client for (functions/*/app.py), and STS, SSO and SSO OIDC, which botocore's
# credential chain builds clients for when a profile asks (never on Lambda, where credentials are variables).
SERVICES = frozenset({"dynamodb", "kinesis", "lambda", "bedrock-runtime", "sqs", "sts", "sso", "sso-oidc"})


def _endpoint_prefixes(data: Path, service: str) -> set[str]:
    """The names ``endpoints.json`` may key ``service`` by: its folder name and each model's ``endpointPrefix``."""
    names = {service}
    for model in (data / service).glob("*/service-2.json*"):
        opener = gzip.open if model.suffix == ".gz" else open
        with opener(model, "rt", encoding="utf-8") as file:
            names.add(json.load(file)["metadata"]["endpointPrefix"])
    return names


def prune(data: Path) -> None:
    """Remove every service folder but :data:`SERVICES`' from ``data``, and their entries from ``endpoints.json``."""
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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 prune_botocore_data.py <site-packages>/botocore/data")
    prune(Path(sys.argv[1]))
