"""llama-server's option table: every flag is known, modelled, or refused with a reason."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from fixtures_gguf import write_tiny
from pydantic import ValidationError

from layerfit.cli import EXIT_BAD_INPUT, main
from layerfit.domain import Deployment, LlamaParams, ModelKind
from layerfit.domain.param_words import ALL_LAYERS, CONVERTERS, EXPERT_FLAGS
from layerfit.errors import InputError
from layerfit.estimators import estimate_profile, read_gguf
from layerfit.gpustack import deployment_from_gpustack
from layerfit.io.documents import load_model
from layerfit.llamacpp.flags import Effect, all_flags, closest_flag, lookup
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

CLUSTER = str(Path(__file__).parent.parent / "examples" / "cluster.yaml")


def test_every_name_is_one_option() -> None:
    names = Counter(name for flag in all_flags() for name in flag.names)
    assert [name for name, count in names.items() if count > 1] == []
    assert all(name.startswith("-") and " " not in name for name in names)
    assert len(all_flags()) > 250  # every llama-server option of the build, not a selection


def test_every_modelled_flag_has_a_field_and_a_converter() -> None:
    modelled = {flag.field for flag in all_flags() if flag.effect is Effect.MODELLED} - {EXPERT_FLAGS}
    assert modelled == set(CONVERTERS)
    assert modelled <= set(LlamaParams.model_fields)


@pytest.mark.parametrize(
    ("name", "effect"),
    [
        ("-c", Effect.MODELLED),
        ("--ctx_size", Effect.MODELLED),  # llama.cpp reads underscores in long names as dashes
        ("-ncmoe", Effect.MODELLED),
        ("--n-cpu-moe", Effect.MODELLED),
        ("-cmoe", Effect.MODELLED),
        ("-ot", Effect.MODELLED),
        ("-ncmoed", Effect.NOT_MODELLED),
        ("--swa-full", Effect.MODELLED),
        ("--fit-target", Effect.DECIDED),
        ("--rpc", Effect.DECIDED),
        ("--threads", Effect.NO_EFFECT),
        ("--cache-ram", Effect.RUN_TIME),
        ("-nkvo", Effect.MODELLED),
        ("-kvu", Effect.MODELLED),
        ("--no-kv-unified", Effect.MODELLED),
        ("-kvo", Effect.MODELLED),
        ("--no-host", Effect.NOT_MODELLED),
    ],
)
def test_flag_effects(name: str, effect: Effect) -> None:
    flag = lookup(name)
    assert flag is not None and flag.effect is effect


def test_closest_flag() -> None:
    assert closest_flag("--ctx-szie") == "--ctx-size"
    assert closest_flag("--n-gpu-layer") == "--n-gpu-layers"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ctx-szie 4096"], "--ctx-szie: not an option of llama-server .*did you mean --ctx-size"),
        (["--no-host"], "--no-host: changes memory in a way layerfit does not model"),
        (["-kvo", "-nkvo"], "-nkvo: given more than once"),
        (["--swa-full=1"], "--swa-full: takes no value"),
        (["--lora", "a.gguf"], "--lora: changes memory in a way layerfit does not model"),
        (["-ncmoed", "4"], "-ncmoed: changes memory in a way layerfit does not model"),
        (["--fit-target 1024"], "--fit-target: cannot be set by the user"),
        (["-ts nan,1"], "-ts: shares must be finite"),
        (["-ts inf"], "-ts: shares must be finite"),
        (["-ts 1e400,1"], "-ts: shares must be finite"),
        (["-ts -1,2"], "-ts: shares must be finite, >= 0"),
        (["-np 0"], "-np: must be at least 1"),
        (["-ub 0"], "-ub: must be between 1"),
        (["-c -1"], "-c: must be between 0"),
        (["-c", "9" * 400], "-c: expected an integer"),
        (["-ctk q9_9"], "-ctk: unknown cache type 'q9_9'"),
        (["-lm", "fast"], "-lm: expected one of"),
        (["8192"], "8192: a value without a flag"),
        (["--threads"], "--threads: missing value"),
        (["--jinja=1"], "--jinja: takes no value"),
        # as llama.cpp b11434 refuses them (measured with llama-completion)
        (["-np 257"], "-np: llama.cpp runs at most 256 sequences, got 257"),
        (["-ts", ",".join(["1"] * 16)], "-ts: 16 shares; llama.cpp takes at most 15"),
        (["-ts 3.5e38,1"], "-ts: shares must be finite, >= 0 and at most 3.402823e"),
        (["-ts 3e38,3e38"], "-ts: the shares add up to 6e"),
        (["-c", "\u0663"], "-c: expected an integer, got '\u0663'"),  # int() reads an Arabic-Indic 3
        (["-c 1_0"], "-c: expected an integer, got '1_0'"),
        (["-ub ' '"], "-ub: expected an integer"),
    ],
)
def test_refused_flags_name_the_flag(args: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        LlamaParams.from_args(args)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n_gpu_layers": 10**30}, "n_gpu_layers: Input should be less than or equal to 2147483647"),
        ({"ctx_size": 2**31}, "ctx_size: Input should be less than or equal to 2147483647"),
        ({"batch_size": 10**30}, "batch_size: Input should be less than or equal to 2147483647"),
        ({"ubatch_size": 2**31}, "ubatch_size: Input should be less than or equal to 2147483647"),
        ({"parallel": 257}, "parallel: Input should be less than or equal to 256"),
        ({"tensor_split": (1e308, 1e308)}, "tensor_split: shares must be finite, >= 0 and at most"),
        ({"tensor_split": (1.0,) * 16}, "tensor_split: 16 shares"),
        ({"extra": ("--rpc", "10.0.0.1:50052")}, "--rpc: cannot be set by the user"),
        ({"extra": ("-c", "4096")}, "-c: sets ctx_size: give it as that parameter, not in extra"),
        ({"extra": ("--port",)}, "--port: missing value"),
        ({"extra": ("8080",)}, "8080: a value without a flag"),
        ({"extra": ("--ctx-szie", "1")}, "--ctx-szie: not an option of llama-server"),
    ],
)
def test_parameters_given_as_fields_are_checked_as_their_flags_are(fields: dict[str, object], message: str) -> None:
    """``params:`` in a deployment file: the same limits as the flags, and ``extra`` read as flags."""
    with pytest.raises(InputError, match=f"deployment.yaml: {message}"):
        load_model(LlamaParams, fields, "deployment.yaml")


def test_extra_keeps_values_with_spaces() -> None:
    params = LlamaParams(extra=("--alias", "my model", "-t", "4"))
    assert params.to_args()[-4:] == ("--alias", "my model", "-t", "4")
    assert LlamaParams.from_args(["--alias 'my model'"]).extra == ("--alias", "my model")


def test_values_as_llama_cpp_reads_them() -> None:
    params = LlamaParams.from_args(["-c 0", "-np -1", "-ngl all", "-fa 1", "-lm dio"])
    assert params.ctx_size == 0 and params.uses_training_ctx
    assert params.parallel is None  # -1: automatic
    assert params.n_gpu_layers == ALL_LAYERS and params.flash_attn == "on" and not params.mmap
    assert LlamaParams.from_args(["-ngl auto"]).n_gpu_layers is None
    assert params.ctx_for(40960) == 40960 and LlamaParams().ctx_for(40960) == 8192


def test_expert_flags_stay_in_order_for_their_reader() -> None:
    params = LlamaParams.from_args(["--threads 4", "--n-cpu-moe=2", "-ot", r"blk\.1\..*=CPU"])
    assert params.extra == ("--threads", "4", "--n-cpu-moe", "2", "-ot", r"blk\.1\..*=CPU")
    assert LlamaParams.from_args([r"-ot blk\.1\..*=CPU"]).extra == ("-ot", r"blk\.1\..*=CPU")  # no shell escapes


def test_pass_through_flags_are_printed_as_llama_server_reads_them() -> None:
    params = LlamaParams.from_args(["--threads=8", "--jinja", "--no-mmap"])
    assert params.extra == ("--threads", "8", "--jinja")
    assert "-lm" in params.to_args() and "--no-mmap" not in params.to_args()


def test_training_context_from_the_file(tmp_path: Path) -> None:
    (path,) = write_gguf(tmp_path / "llama1b.gguf", REAL_MODELS["llama-3.2-1b"])
    shape = read_gguf(str(path))
    at_zero = estimate_profile(shape, LlamaParams.from_args(["-c 0"]))
    at_training = estimate_profile(shape, LlamaParams(ctx_size=shape.context_length))
    assert shape.context_length and at_zero.block_kv_bytes == at_training.block_kv_bytes
    with pytest.raises(ValidationError, match="training context"):
        Deployment(name="m", profile=at_zero, params=LlamaParams(ctx_size=0))


def test_gpustack_adapter_uses_the_table() -> None:
    model = {"name": "m", "backend_parameters": ["--no-host"]}
    with pytest.raises(InputError, match="--no-host: changes memory"):
        deployment_from_gpustack(model, gguf_path="m.gguf")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--deploymnet", "d.yaml"], "--deploymnet: unknown option of layerfit plan .*did you mean --deployment?"),
        (["--model", "m.gguf", "--polcy", "spread"], "--polcy: unknown option .*did you mean --policy?"),
        (["--model", "m.gguf", "--ctx-szie", "4096"], "did you mean --ctx-size?"),
        (["--model", "m.gguf", "--no-host"], "--no-host: changes memory in a way layerfit does not model"),
    ],
)
def test_cli_names_the_unknown_option(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code = main(["plan", "--cluster", CLUSTER, *argv])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert re.search(message, err), err


@pytest.mark.parametrize(
    ("kind", "args", "flag", "wanted"),
    [
        # llama.cpp: --embedding serves embeddings only (and sets n_batch = n_ubatch), --rerank is
        # --embedding with rank pooling; before, all three passed through as "no effect on memory"
        (ModelKind.LLM, ["--embedding"], "--embedding", "embedding or reranker"),
        (ModelKind.LLM, ["--embeddings"], "--embeddings", "embedding or reranker"),
        (ModelKind.LLM, ["--reranking"], "--reranking", "reranker"),
        (ModelKind.EMBEDDING, ["--rerank"], "--rerank", "reranker"),
        (ModelKind.LLM, ["--pooling", "mean"], "--pooling", "embedding"),
        (ModelKind.RERANKER, ["--rerank", "--pooling", "mean"], "--pooling", "embedding"),  # the last one wins
        (ModelKind.EMBEDDING, ["--embedding", "--pooling=rank"], "--pooling", "reranker"),
        (ModelKind.IMAGE, ["--embedding"], "--embedding", "embedding or reranker"),
    ],
)
def test_embedding_switches_that_contradict_the_kind_are_refused(
    kind: ModelKind, args: list[str], flag: str, wanted: str
) -> None:
    message = f"{flag}: .*for kind {wanted}, but the deployment's kind is {kind.value}"
    with pytest.raises(ValidationError, match=message):
        Deployment(name="m", gguf_path="m.gguf", kind=kind, backend_parameters=args)


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        (ModelKind.EMBEDDING, ["--embedding", "--pooling", "mean"]),
        (ModelKind.RERANKER, ["--rerank"]),
        (ModelKind.RERANKER, ["--embedding", "--pooling", "rank"]),
        (ModelKind.LLM, ["--pooling", "none"]),
    ],
)
def test_embedding_switches_that_agree_with_the_kind_pass_through(kind: ModelKind, args: list[str]) -> None:
    deployment = Deployment(name="m", gguf_path="m.gguf", kind=kind, backend_parameters=args)
    assert deployment.params.extra == tuple(args)


def test_an_unknown_pooling_is_refused() -> None:
    with pytest.raises(ValidationError, match="--pooling: 'max' is not a pooling of llama-server"):
        Deployment(name="m", gguf_path="m.gguf", kind=ModelKind.EMBEDDING, backend_parameters=["--pooling", "max"])


def test_cli_refuses_an_embedding_flag_on_a_generation_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--cluster", CLUSTER, "--model", "m.gguf", "--embedding"]) == EXIT_BAD_INPUT
    assert "--embedding: --embedding makes llama-server a server for kind embedding" in capsys.readouterr().err
    assert main(["plan", "--cluster", CLUSTER, "--model", "m.gguf", "--kind", "llm", "--rerank"]) == EXIT_BAD_INPUT


def test_an_encoder_planned_as_a_generation_model_is_estimated_as_embeddings_and_says_so(tmp_path: Path) -> None:
    path = str(write_tiny(tmp_path, data="header", architecture="bert", encoder=True))
    as_llm = estimate_profile(path, LlamaParams.from_args(["-c", "2048"]))
    as_embedding = estimate_profile(path, LlamaParams.from_args(["-c", "2048"]), kind=ModelKind.EMBEDDING)
    assert as_llm.block_weight_bytes == as_embedding.block_weight_bytes
    assert as_llm.main == as_embedding.main and as_llm.output_compute_bytes == 0
    assert any("bert is not causal" in w and "kind is llm" in w for w in as_llm.warnings)
    assert not any("not causal" in w for w in as_embedding.warnings)


def test_estimate_models_the_embedding_switches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # estimate has no kind of its own: the switches decide it (before: ignored, a generation run)
    path = str(write_tiny(tmp_path, data="header"))
    runs = {}
    for extra in ([], ["--embedding"], ["--pooling", "rank", "--embedding"]):
        assert main(["estimate", path, "--json", *extra]) == 0
        runs[" ".join(extra)] = json.loads(capsys.readouterr().out)["parameters"]
    assert [run["embedding"] for run in runs.values()] == [False, True, True]
    assert main(["estimate", path, "--rerank", "--pooling", "mean"]) == EXIT_BAD_INPUT
    assert "--pooling: contradicts the other embedding or reranking flags" in capsys.readouterr().err


def test_no_kv_offload_round_trips() -> None:
    """-nkvo is read into the parameters and written back into the command; -kvo is the default."""
    kept = LlamaParams.from_args(["--no-kv-offload"])
    assert not kept.kv_offload and "-nkvo" in kept.to_args()
    assert LlamaParams.from_args(kept.to_args()).kv_offload is False
    assert LlamaParams.from_args(["-kvo"]).kv_offload and LlamaParams().kv_offload


def test_kv_unified_round_trips() -> None:
    for flag, unified in (("-kvu", True), ("--no-kv-unified", False)):
        params = LlamaParams.from_args(["-np", "3", flag])
        assert params.kv_unified is unified
        assert LlamaParams.from_args(params.to_args()).kv_unified is unified
    assert LlamaParams().kv_unified is None
