"""What `sam build` produces runs: the relay from its built artifacts, on the built streaming runtime layer.

Each artifact is built by its own Makefile target into a fresh folder, as `sam build` (BuildMethod
makefile) does, then the relay runs behind the local Runtime API and Function URL with only those
folders on its path and the built exec wrapper starting it. The wheels are for Lambda (arm64, 3.13);
the packages the relay needs fall back to pure Python here, so the layout, the wrapper, the shipped
files (the chat page) and the imports are what this proves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import botocore.loaders
import httpx
import pytest

from chatstream_local.lambda_.function_spec import FunctionSpec
from chatstream_local.lambda_.function_url import FunctionUrlServer
from chatstream_local.lambda_.service import LocalLambda
from chatstream_local.template import Template
from tests.layer_operations import FUNCTION_OPERATIONS
from tests.support import REPO_ROOT, require_or_skip

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.integration

BYTECODE_MK = REPO_ROOT / "make/bytecode.mk"


def build(target: str, source: Path, out: Path) -> Path:
    out.mkdir()
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["make", "-s", "-C", str(source), target, f"ARTIFACTS_DIR={out}"], check=True, env=env, timeout=300)
    return out


@dataclass(frozen=True)
class Built:
    """The relay's artifacts, each built by its Makefile target as `sam build` runs it, and the bytecode files and
    ``__pycache__`` folders each held right after its build (before the relay runs from them and this machine's
    Python caches what it imports), relative to the folder."""

    folders: dict[str, Path]
    bytecode: dict[str, list[str]]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("sam-build")
    folders = {
        "ChatstreamLayer": build("build-ChatstreamLayer", REPO_ROOT / "layers/chatstream", root / "ChatstreamLayer"),
        "StreamingRuntimeLayer": build(
            "build-StreamingRuntimeLayer", REPO_ROOT / "layers/streaming-runtime", root / "Streaming"
        ),
        "RelayFunction": build("build-RelayFunction", REPO_ROOT / "functions/relay", root / "RelayFunction"),
    }
    bytecode = {
        name: [
            str(path.relative_to(folder))
            for path in folder.rglob("*")
            if path.suffix in {".pyc", ".pyo"} or path.name == "__pycache__"
        ]
        for name, folder in folders.items()
    }
    return Built(folders, bytecode)


@pytest.fixture(scope="module")
def built_relay(built: Built) -> Iterator[str]:
    shared, runtime = built.folders["ChatstreamLayer"], built.folders["StreamingRuntimeLayer"]
    function = built.folders["RelayFunction"]
    spec = FunctionSpec(
        name="RelayFunction",
        handler="app.handler",
        code_dirs=[function, shared / "python", runtime / "python"],
        environment={
            "CHAT_TABLE_NAME": "chatstream-ChatTable",
            "PROXY_FUNCTION_NAME": "chatstream-ProxyFunction",
            "AUTH_TYPE": "NONE",
            "MODEL_ID": Template.load().raw["Parameters"]["ModelId"]["Default"],
            "POWERTOOLS_SERVICE_NAME": "chatstream",
            "POWERTOOLS_METRICS_NAMESPACE": "Chatstream",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
        },
        timeout_s=30,
        runtime="streaming",
        exec_wrapper=runtime / "bin" / "chatstream-streaming",
    )
    with LocalLambda([spec]) as local, FunctionUrlServer(local, "RelayFunction") as url:
        yield url.url


def test_the_built_relay_answers_on_its_function_url(built_relay: str) -> None:
    # WHEN the relay built like sam build does is called THEN it answers as HTTP_API.md says
    assert httpx.get(f"{built_relay}/health", timeout=60).json() == {"status": "ok"}
    bad = httpx.post(f"{built_relay}/chat", content=b"{not json", timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"


def test_the_built_layer_ships_the_chat_page(built: Built, built_relay: str) -> None:
    page = httpx.get(f"{built_relay}/", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<html" in page.text.lower()
    # AND the vendored Markdown library, byte for byte, with its licences and README beside it in the layer
    static = REPO_ROOT / "layers/chatstream/chatstream/relay/static"
    served = httpx.get(f"{built_relay}/static/vendor/markdown-it.umd.min.js", timeout=30)
    assert served.status_code == 200 and served.content == (static / "vendor/markdown-it.umd.min.js").read_bytes()
    shipped = built.folders["ChatstreamLayer"] / "python/chatstream/relay/static/vendor"
    assert {path.name for path in shipped.iterdir()} == {path.name for path in (static / "vendor").iterdir()}


def test_the_built_layer_holds_the_functions_package_and_no_operator_command(built: Built) -> None:
    # GIVEN the chatstream layer as `sam build` builds it, and the repository's package and operator commands
    layer = built.folders["ChatstreamLayer"] / "python"
    source = REPO_ROOT / "layers/chatstream/chatstream"
    operator_commands = REPO_ROOT / "ops/chatstream_ops"
    commands = {path.name for path in operator_commands.glob("*.py")} - {"__init__.py"}
    assert "redrive.py" in commands
    # THEN its package is the repository's, module for module
    shipped = sorted(str(path.relative_to(layer / "chatstream")) for path in (layer / "chatstream").rglob("*.py"))
    assert shipped == sorted(str(path.relative_to(source)) for path in source.rglob("*.py"))
    # AND no operator command is in it: not their package, not one of their modules, nor any module a person runs
    assert operator_commands.name not in {path.name for path in layer.iterdir()}
    assert [name for name in shipped if Path(name).name in commands] == []
    runnable = [name for name in shipped if "__main__" in (layer / "chatstream" / name).read_text(encoding="utf-8")]
    assert runnable == []


def test_the_built_layer_ships_the_openapi_document(built_relay: str) -> None:
    # WHEN the built relay (the template's default model and MaxTokensLimit) is asked for its OpenAPI document
    # THEN it is the repository's, byte for byte
    served = httpx.get(f"{built_relay}/openapi.json", timeout=30)
    assert served.status_code == 200 and served.headers["content-type"] == "application/json"
    assert served.content == (REPO_ROOT / "layers/chatstream/chatstream/relay/openapi.json").read_bytes()


def python313() -> str:
    """The Python 3.13 the builds compile bytecode with (make/bytecode.mk's choice), or "" when there is none."""
    run = subprocess.run(
        ["make", "-s", "-f", str(BYTECODE_MK), "--eval", 'print-python313: ; @echo "$(PYTHON313)"', "print-python313"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return run.stdout.strip()


# Where each artifact's folder is on Lambda: what the bytecode's file names must say (tracebacks).
LAMBDA_PATHS = {"ChatstreamLayer": "/opt", "StreamingRuntimeLayer": "/opt", "RelayFunction": "/var/task"}


def test_the_built_artifacts_ship_no_bytecode_of_the_build_machines_python(built: Built) -> None:
    # GIVEN the layers and the function as `sam build` builds them (pip installs Powertools and its dependencies)
    assert (built.folders["ChatstreamLayer"] / "python" / "aws_lambda_powertools").is_dir()
    # THEN any bytecode is Lambda's python3.13's: what this machine's Python would compile, Lambda never loads
    for name, compiled in built.bytecode.items():
        foreign = [path for path in compiled if not path.endswith((".cpython-313.pyc", "__pycache__"))]
        assert foreign == [], (name, foreign[:5], len(foreign))


def test_every_module_ships_its_python313_bytecode_unchecked(built: Built) -> None:
    python = python313()
    require_or_skip(
        bool(python), "no Python 3.13 on this machine (make/bytecode.mk found none; PYTHON313=... names one)"
    )
    for name, folder in built.folders.items():
        sources = sorted(folder.rglob("*.py"))
        assert sources, name
        for source in sources:
            # THEN each module has its 3.13 bytecode beside it, in the folder the build wrote
            relative = source.relative_to(folder)
            cached = f"{relative.parent / '__pycache__' / relative.stem}.cpython-313.pyc".removeprefix("./")
            assert cached in built.bytecode[name], (name, str(relative))
            header = (folder / cached).read_bytes()[:16]
            # hash-based and unchecked (flags 0b01): loaded without looking at the source's timestamp
            assert int.from_bytes(header[4:8], "little") == 1, (name, cached)
    # AND Python 3.13 takes it as its own: same magic number, the file named where Lambda has it
    probe = (
        "import importlib.util, marshal, sys; data = open(sys.argv[1], 'rb').read(); "
        "print(data[:4] == importlib.util.MAGIC_NUMBER, marshal.loads(data[16:]).co_filename)"
    )
    for name, module in [("ChatstreamLayer", "python/chatstream/records"), ("RelayFunction", "app")]:
        pyc = built.folders[name] / f"{Path(module).parent / '__pycache__' / Path(module).name}.cpython-313.pyc"
        out = subprocess.run([python, "-c", probe, str(pyc)], capture_output=True, text=True, check=True).stdout
        assert out.split() == ["True", f"{LAMBDA_PATHS[name]}/{module}.py"]


def test_a_build_without_python313_ships_sources_and_says_so_once(tmp_path: Path) -> None:
    # GIVEN no Python 3.13 (PYTHON313 set empty) WHEN the relay function is built
    out = tmp_path / "RelayFunction"
    out.mkdir()
    run = subprocess.run(
        ["make", "-s", "-C", str(REPO_ROOT / "functions/relay"), "build-RelayFunction", f"ARTIFACTS_DIR={out}"]
        + ["PYTHON313="],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # THEN the build succeeds with sources only, and one line says why
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.rglob("*")) == ["app.py"]
    assert run.stderr.splitlines() == [
        f"warning: no Python 3.13 found (set PYTHON313 to one): {out} ships sources only, compiled at every cold start"
    ]


# Each service a function calls, resolved the way a client is built: endpoint, signing name and region, FIPS or not.
_RESOLVE_CLIENTS = """
import json, botocore, botocore.session
from botocore.config import Config
seen = {"botocore": botocore.__file__}
for region in ("us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1", "ap-southeast-7"):
    for service in ("dynamodb", "kinesis", "lambda", "bedrock-runtime", "sqs", "ssm", "sts"):
        for fips in (False, True):
            client = botocore.session.get_session().create_client(
                service, region_name=region, aws_access_key_id="a", aws_secret_access_key="b",
                config=Config(use_fips_endpoint=fips),
            )
            signer = client._request_signer
            seen[f"{region} {service} {fips}"] = [
                client.meta.endpoint_url, signer._signing_name, signer._region_name, signer.signature_version
            ]
print(json.dumps(seen))
"""


def test_the_built_layer_keeps_the_functions_services_and_resolves_them_as_botocore_does(built: Built) -> None:
    # GIVEN the layer's botocore, its data pruned by the build to the services the functions call
    layer = built.folders["ChatstreamLayer"] / "python"
    data = layer / "botocore" / "data"
    assert {p.name for p in data.iterdir() if p.is_dir()} == {
        "dynamodb",
        "kinesis",
        "lambda",
        "bedrock-runtime",
        "sqs",
        "ssm",
        "sts",
        "sso",
        "sso-oidc",
    }
    assert (data / "endpoints.json").stat().st_size < 100_000  # every other service's endpoints left out

    def resolve(pythonpath: str | None) -> dict[str, object]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        run = subprocess.run(
            [sys.executable, "-c", _RESOLVE_CLIENTS], env=env, capture_output=True, text=True, check=True, timeout=60
        )
        return dict(json.loads(run.stdout))

    # WHEN a client of each is built with it and with the full botocore of the same version
    pruned, full = resolve(str(layer)), resolve(None)
    # THEN the pruned one was used, and every client resolves alike
    assert str(pruned.pop("botocore")).startswith(str(layer)) and not str(full.pop("botocore")).startswith(str(layer))
    assert pruned == full


def _without_documentation(model: dict[str, Any]) -> dict[str, Any]:
    """The model as the build should ship it: no ``documentation`` of the service, operations, shapes or members."""

    def bare(node: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in node.items() if k != "documentation"}

    shapes = {}
    for name, shape in model["shapes"].items():
        shapes[name] = bare(shape) | (
            {"members": {m: bare(spec) for m, spec in shape["members"].items()}} if "members" in shape else {}
        )
    return bare(model) | {"operations": {n: bare(op) for n, op in model["operations"].items()}, "shapes": shapes}


def _references(shape: dict[str, Any]) -> list[str]:
    names = [shape[key]["shape"] for key in ("member", "key", "value") if key in shape]
    return names + [member["shape"] for member in shape.get("members", {}).values()]


def test_the_built_layer_ships_each_service_model_uncompressed_without_documentation_with_the_operations_called(
    built: Built,
) -> None:
    # GIVEN the layer's botocore data, and the full botocore of the same version this environment has
    data = built.folders["ChatstreamLayer"] / "python" / "botocore" / "data"
    full = botocore.loaders.create_loader()
    for service, operations in FUNCTION_OPERATIONS.items():
        api_version = full.determine_latest_version(service, "service-2")
        # THEN each is one plain JSON file (no gzip to undo at init), of the newest API version only
        assert [p.name for p in (data / service / api_version).glob("service-2.json*")] == ["service-2.json"]
        assert [p.parent.name for p in (data / service).glob("*/service-2.json*")] == [api_version]
        shipped = json.loads((data / service / api_version / "service-2.json").read_text(encoding="utf-8"))
        whole = _without_documentation(full.load_service_model(service, "service-2"))
        assert "documentation" in json.dumps(full.load_service_model(service, "service-2"))
        # AND it holds the operations the functions call, each as botocore has it but for the prose
        assert set(shipped["operations"]) == operations
        assert all(shipped["operations"][name] == whole["operations"][name] for name in operations)
        # AND every shape they reach, as botocore has it, and no other
        assert all(shipped["shapes"][name] == whole["shapes"][name] for name in shipped["shapes"])
        reached, pending = (
            set(),
            [
                ref["shape"]
                for op in shipped["operations"].values()
                for ref in (op.get("input"), op.get("output"))
                if ref
            ]
            + [error["shape"] for op in shipped["operations"].values() for error in op.get("errors", ())],
        )
        while pending:
            name = pending.pop()
            if name not in reached:
                reached.add(name)
                pending += _references(whole["shapes"][name])
        assert set(shipped["shapes"]) == reached
        # AND every other key of the model is kept
        assert {k: v for k, v in shipped.items() if k not in ("operations", "shapes")} == {
            k: v for k, v in whole.items() if k not in ("operations", "shapes")
        }
