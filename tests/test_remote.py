"""GGUF headers over HTTP (layerfit.remote): hf://, ms:// and https:// locations against a local
server that behaves like Hugging Face's resolve endpoint and its CDN, the header cache, split
models, and the CLI's estimate and plan on a remote model. The server counts the bytes it sends:
only the header's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from http_fixtures import REPO, Server, serve_header, serve_model, serving, sparse_model

from layerfit.cli import EXIT_BAD_INPUT, EXIT_PLACED, main
from layerfit.errors import InputError
from layerfit.estimators import read_gguf, read_header
from layerfit.remote import cache, parse_location
from layerfit.remote.source import MAX_STEP
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS, write_gguf

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _same_shape(remote: object, local: object) -> None:
    ignore = {"path", "files"}
    assert remote.model_dump(exclude=ignore) == local.model_dump(exclude=ignore)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(GROUND_TRUTH_MODELS))
def test_hf_header_is_the_local_one_and_only_header_bytes_are_read(
    name: str, hub: tuple[Server, Server], tmp_path: Path
) -> None:
    front, cdn = hub
    local, size, header_bytes = serve_model(hub, tmp_path, name, f"{name}.gguf")
    shape = read_gguf(f"hf://{REPO}/{name}.gguf", allow_missing_data=False)  # the tensor extents checked
    _same_shape(shape, read_gguf(str(local)))
    assert shape.path == f"hf://{REPO}/{name}.gguf" and shape.file_bytes == size > 10**9
    assert front.body_bytes == 0  # the resolve endpoint only redirects
    assert header_bytes <= cdn.body_bytes <= max(header_bytes + MAX_STEP, 256 << 10)
    assert all(entry.path.startswith("/cdn/") for entry in cdn.log)


def test_a_large_vocabulary_is_read_in_growing_windows(hub: tuple[Server, Server], tmp_path: Path) -> None:
    _, cdn = hub
    local, size, header_bytes = sparse_model(tmp_path, "llama8b-q4", tokenizer=True, merges=50_000)
    assert header_bytes > 3 << 20  # 128,256 tokens with scores and types, 50,000 merges
    serve_header(hub, local, "big.gguf", size, header_bytes)
    _same_shape(read_gguf(f"hf://{REPO}/big.gguf"), read_gguf(str(local)))
    ranges = [entry.headers["range"] for entry in cdn.log]
    starts = [int(r.removeprefix("bytes=").split("-")[0]) for r in ranges]
    assert starts == sorted(starts) and len(ranges) >= 4  # windows that grow, each after the last
    assert header_bytes <= cdn.body_bytes <= header_bytes + MAX_STEP


def test_token_goes_to_the_hub_only_never_to_the_cdn(
    hub: tuple[Server, Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, cdn = hub
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    serve_model(hub, tmp_path, "llama1b-f16", "m.gguf")
    read_gguf(f"hf://{REPO}/m.gguf")
    assert front.log and all(e.headers.get("authorization") == "Bearer hf_secret_token" for e in front.log)
    assert cdn.log and all("authorization" not in e.headers for e in cdn.log)
    stored = b"".join(path.read_bytes() for path in cache.root().rglob("*") if path.is_file())
    assert stored and b"hf_secret_token" not in stored


def test_a_url_of_another_host_gets_no_token(env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    local, size, header_bytes = sparse_model(tmp_path, "llama1b-f16")
    with serving(Server()) as other:
        serve_header((other,), local, "m.gguf", size, header_bytes)
        read_gguf(f"{other.base}/{REPO}/resolve/main/m.gguf")
        assert other.log and all("authorization" not in e.headers for e in other.log)


def test_cache_fetches_a_header_once(hub: tuple[Server, Server], tmp_path: Path) -> None:
    _, cdn = hub
    serve_model(hub, tmp_path, "qwen30b-q4", "m.gguf")
    first = read_gguf(f"hf://{REPO}/m.gguf")
    fetched = cdn.body_bytes
    assert cache.usage()[0] == 1
    again = read_gguf(f"hf://{REPO}/m.gguf")
    assert again == first and cdn.body_bytes == fetched  # one conditional request, 304 without a body
    assert cdn.log[-1].headers.get("if-none-match") is not None


def test_cache_at_a_commit_asks_nothing(hub: tuple[Server, Server], tmp_path: Path) -> None:
    front, cdn = hub
    serve_model(hub, tmp_path, "llama1b-f16", "m.gguf", revision=COMMIT)
    first = read_gguf(f"hf://{REPO}@{COMMIT}/m.gguf")
    requests = len(front.log) + len(cdn.log)
    assert read_gguf(f"hf://{REPO}@{COMMIT}/m.gguf") == first and len(front.log) + len(cdn.log) == requests


def test_cache_off_and_clear(
    hub: tuple[Server, Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cdn = hub
    serve_model(hub, tmp_path, "llama1b-f16", "m.gguf")
    monkeypatch.setenv("LAYERFIT_CACHE", "off")
    read_gguf(f"hf://{REPO}/m.gguf")
    once = cdn.body_bytes
    read_gguf(f"hf://{REPO}/m.gguf")
    assert cdn.body_bytes == 2 * once and not cache.root().exists()
    monkeypatch.delenv("LAYERFIT_CACHE")
    read_gguf(f"hf://{REPO}/m.gguf")
    assert cache.usage()[0] == 1
    assert main(["cache", "clear"]) == EXIT_PLACED
    assert "1 header" in capsys.readouterr().out and cache.usage() == (0, 0)


def test_a_changed_file_is_fetched_again(hub: tuple[Server, Server], tmp_path: Path) -> None:
    serve_model(hub, tmp_path, "llama1b-f16", "m.gguf")
    assert read_gguf(f"hf://{REPO}/m.gguf").block_count == 16
    two, size_two, header_two = sparse_model(tmp_path, "llama8b-q4")
    serve_header(hub, two, "m.gguf", size_two, header_two)  # a new ETag at the same URL
    assert read_gguf(f"hf://{REPO}/m.gguf").block_count == 32


def test_split_model_every_shard_read_by_its_header(hub: tuple[Server, Server], tmp_path: Path) -> None:
    _, cdn = hub
    spec = GROUND_TRUTH_MODELS["llama1b-f16"]
    shards = write_gguf(tmp_path / "split.gguf", spec, data="sparse", split_max_tensors=60)
    assert len(shards) == 3
    for shard in shards:
        header = read_header(shard)
        serve_header(hub, shard, shard.name, shard.stat().st_size, header.header_bytes)
    first = f"hf://{REPO}/{shards[0].name}"
    shape = read_gguf(first)
    _same_shape(shape, read_gguf(str(shards[0])))
    assert shape.files == tuple(f"hf://{REPO}/{shard.name}" for shard in shards)
    assert cdn.body_bytes < sum(read_header(s).header_bytes for s in shards) + 3 * MAX_STEP


def test_modelscope_and_plain_urls(env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local, size, header_bytes = sparse_model(tmp_path, "llama1b-f16")
    expected = read_gguf(str(local))
    with serving(Server()) as modelscope:
        head = tmp_path / "m.head"
        with open(local, "rb") as handle:
            head.write_bytes(handle.read(header_bytes))
        modelscope.add(f"/models/{REPO}/resolve/master/m.gguf", head, size)
        monkeypatch.setenv("MODELSCOPE_URL_SCHEME", "http://")
        monkeypatch.setenv("MODELSCOPE_DOMAIN", f"127.0.0.1:{modelscope.port}")
        _same_shape(read_gguf(f"ms://{REPO}/m.gguf"), expected)
        _same_shape(read_gguf(f"{modelscope.base}/models/{REPO}/resolve/master/m.gguf"), expected)


def test_estimate_and_plan_on_a_hugging_face_model(
    hub: tuple[Server, Server], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cdn = hub
    local, _, header_bytes = serve_model(hub, tmp_path, "llama8b-q4", "llama8b.gguf")
    location = f"hf://{REPO}/llama8b.gguf"
    assert main(["estimate", location, "--json", "-c", "8192"]) == EXIT_PLACED
    remote = json.loads(capsys.readouterr().out)
    assert main(["estimate", str(local), "--json", "-c", "8192"]) == EXIT_PLACED
    assert remote["profile"] == json.loads(capsys.readouterr().out)["profile"]
    assert main(["examples", str(tmp_path / "ex")]) == EXIT_PLACED
    capsys.readouterr()
    code = main(["plan", "--cluster", str(tmp_path / "ex" / "cluster.yaml"), "--model", location, "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert code == EXIT_PLACED and plan["best"] is not None
    argv = plan["commands"][-1]["argv"]
    assert argv[:4] == ["-hfr", REPO, "-hff", "llama8b.gguf"]  # llama.cpp fetches it itself
    assert cdn.body_bytes <= header_bytes + MAX_STEP  # the plan read the cached header


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        ("ftp://host/m.gguf", "unknown scheme ftp://"),
        ("s3://bucket/m.gguf", "unknown scheme s3://"),
        ("https://user:secret@host/m.gguf", "credentials in a URL are refused: set HF_TOKEN"),
        ("https://:secret@host/m.gguf", "credentials in a URL are refused"),
        ("hf://org/m.gguf", "expected hf://ORG/REPO[@REVISION]/FILE.gguf"),
        ("hf://org/repo/../m.gguf", "'..' part"),
        ("hf://org/repo/*Q4*.gguf", "is a pattern"),
        ("hf://org/repo/m.bin", "expected a .gguf file"),
        ("https:///m.gguf", "names no host"),
        ("https://host:99999/m.gguf", "not a URL"),
    ],
)
def test_refused_locations(env: Path, location: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match=problem.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_location(location)
    assert main(["estimate", location]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert problem in err and "secret" not in err and "Traceback" not in err


def test_hub_urls(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_location("hf://org/repo/sub/m.gguf").url == "https://huggingface.co/org/repo/resolve/main/sub/m.gguf"
    pr = parse_location("hf://org/repo@refs%2Fpr%2F1/m.gguf")
    assert pr.revision == "refs/pr/1" and pr.url.endswith("/resolve/refs%2Fpr%2F1/m.gguf")
    assert parse_location("ms://org/repo/m.gguf").url == "https://modelscope.cn/models/org/repo/resolve/master/m.gguf"
    assert parse_location(f"hf://org/repo@{COMMIT}/m.gguf").immutable
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example/")
    mirrored = parse_location("hf://org/repo/m.gguf")
    assert mirrored.url.startswith("https://hf-mirror.example/org/") and mirrored.token_origin == (
        "https://hf-mirror.example:443"
    )
    assert parse_location("https://huggingface.co/org/repo/resolve/main/m.gguf").token_origin is None
    monkeypatch.setenv("HF_ENDPOINT", "https://u:p@mirror")
    with pytest.raises(InputError, match="HF_ENDPOINT: credentials"):
        parse_location("hf://org/repo/m.gguf")


def test_a_deployment_file_and_a_url_with_a_query(
    hub: tuple[Server, Server], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    front, _ = hub
    serve_model(hub, tmp_path, "llama1b-f16", "m.gguf")
    assert main(["examples", str(tmp_path / "ex")]) == EXIT_PLACED
    cluster = str(tmp_path / "ex" / "cluster.yaml")
    deployment = tmp_path / "remote.yaml"
    deployment.write_text(f"name: remote\ngguf_path: hf://{REPO}/m.gguf\nbackend_parameters: ['-c', '4096']\n")
    capsys.readouterr()
    assert main(["plan", "--cluster", cluster, "--deployment", str(deployment), "--json"]) == EXIT_PLACED
    assert json.loads(capsys.readouterr().out)["best"] is not None
    url = f"{front.base}/{REPO}/resolve/main/m.gguf?download=true"
    assert main(["plan", "--cluster", cluster, "--model", url, "--json", "-c", "4096"]) == EXIT_PLACED
    plan = json.loads(capsys.readouterr().out)
    assert plan["deployment"] == "m" and plan["commands"][-1]["argv"][:2] == ["-mu", url]
