"""Reading YAML: the event reader gives exactly what ``yaml.load`` with the safe loader gives, the
features it leaves to PyYAML still work, and oversized files are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from layerfit.domain import Cluster
from layerfit.errors import InputError
from layerfit.io import documents as io
from layerfit.io.documents import load_file, parse_yaml, yaml_loader


def pyyaml(text: str) -> Any:
    return yaml.load(text, Loader=yaml_loader())


def outcome(read: Any, text: str) -> Any:
    """The document, or the error's type and message."""
    try:
        return read(text)
    except yaml.YAMLError as error:
        return type(error), str(error)


SCALAR_TEXTS = ["1", "-7", "0x1f", "0o17", "1_000", "2.5", "1e3", ".inf", "yes", "No", "on", "null", "~", "",
                "2020-01-01", "24 GiB", "cuda", "'3'", '"x: y"', "12:30", "=", "!!str 4", "!!int '5'"]  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x",
        *(f"a: {scalar}\nb: [{scalar}, {scalar}]\n" for scalar in SCALAR_TEXTS),
        "- - - 1\n  - 2\n- {a: [3, {b: c}]}",
        "? a\n: b",
        "--- 1\n...\n",
        # left to yaml.load: anchors and aliases, merge keys, explicit tags on collections,
        # mappings as keys, several documents
        "a: &x [1, 2]\nb: *x",
        "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2",
        "!!map {a: 1}",
        "a: !!set {x, y}",
        "{[1]: 2}",  # an error in both
    ],
)
def test_the_same_document_as_pyyaml(text: str) -> None:
    assert outcome(parse_yaml, text) == outcome(pyyaml, text)


@pytest.mark.parametrize("text", ["- 1\n---\n- 2\n", "a: [1", "a: b: c", "{[1, 2]: x, [1, 2]: y}: 1", "a: *nowhere"])
def test_the_same_errors_as_pyyaml(text: str) -> None:
    expected = outcome(pyyaml, text)
    assert isinstance(expected, tuple) and outcome(parse_yaml, text) == expected


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["yes", "off", "~", "0x10", "1_0", "24 GiB", "2001-12-14", "<<", "!x", "&a", "*a"]),
)
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(scalars, children, max_size=4),
    max_leaves=30,
)


@given(document=documents, flow=st.sampled_from([None, True, False]))
def test_any_dumped_document_reads_back_as_pyyaml_reads_it(document: Any, flow: bool | None) -> None:
    text = yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True)
    assert parse_yaml(text) == pyyaml(text)


def test_a_large_cluster_reads_the_same(tmp_path: Path) -> None:
    gpu = "      - {{index: {}, type: cuda, total_vram_bytes: 80 GiB, allocatable_vram_bytes: 78 GiB}}"
    gpus = "\n".join(gpu.format(g) for g in range(8))
    workers = "".join(
        f"  - id: {w}\n    name: w{w}\n    total_ram_bytes: 512 GiB\n    allocatable_ram_bytes: 480 GiB\n"
        f"    gpus:\n{gpus}\n"
        for w in range(200)
    )
    path = tmp_path / "cluster.yaml"
    path.write_text("workers:\n" + workers, encoding="utf-8")
    cluster = load_file(Cluster, path)
    assert cluster == Cluster.model_validate(pyyaml(path.read_text(encoding="utf-8")))
    assert len(cluster.workers) == 200 and cluster.workers[-1].gpus[7].allocatable_vram_bytes == 78 * 1024**3


def test_files_above_the_size_limit_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(io, "MAX_FILE_BYTES", 100)
    path = tmp_path / "cluster.yaml"
    path.write_text("workers: []\n" + "#" * 100, encoding="utf-8")
    with pytest.raises(InputError, match=r"cluster.yaml: 112 bytes: input files are limited to 100 bytes"):
        load_file(Cluster, path)


def laughs(levels: int, fan_out: int = 10) -> str:
    """The "billion laughs" document: each anchor a list of ``fan_out`` aliases of the one before."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * fan_out) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan_out) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_aliases_that_expand_beyond_the_limit_are_refused_without_expanding(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(laughs(9) + "workers: *l9\n", encoding="utf-8")  # 10^10 nodes when expanded
    with pytest.raises(InputError, match=r"cluster.yaml: refused: its aliases expand it to more than 100000 nodes"):
        load_file(Cluster, path)


def test_aliases_up_to_the_limit_read_as_pyyaml_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    text = laughs(2)  # 17 nodes written (the root, 3 keys, 11 + 1 + 1 lists and items), 1,237 expanded
    assert parse_yaml(text) == pyyaml(text)
    monkeypatch.setattr(io, "MAX_ALIASED_NODES", 1237 - 17)
    assert parse_yaml(text) == pyyaml(text)
    monkeypatch.setattr(io, "MAX_ALIASED_NODES", 1237 - 17 - 1)
    with pytest.raises(io.AliasExpansionError):
        parse_yaml(text)


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("workers: &w [*w]\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"cluster.yaml: refused: an alias refers to a node that contains it"):
        load_file(Cluster, path)


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("plain.yaml", "workers: []\nworkers: [1]\n", "line 2"),  # yaml.load keeps the last, silently
        ("nested.yaml", "a:\n  b: 1\n  c: 2\n  b: 3\n", "line 4"),
        ("equal.yaml", "1: a\n0x1: b\n", "line 2"),  # two spellings of one integer key
        ("aliased.yaml", "x: &v 1\nworkers: []\ny: *v\nworkers: []\n", "line 4"),  # yaml.load's path
        ("object.json", '{"workers": [], "workers": [1]}', ""),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path: Path, name: str, text: str, line: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=f"given twice in one mapping.*{line}"):
        io.read_document(path)


def test_a_merge_key_may_be_overridden() -> None:
    assert parse_yaml("base: &b {x: 1, y: 1}\nderived:\n  <<: *b\n  y: 2\n")["derived"] == {"x": 1, "y": 2}
