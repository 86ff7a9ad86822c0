"""Reading a GGUF file's header by hand: magic, version, metadata, tensor table, and whether the file is long
enough to hold every tensor it declares. No tensor data is read.

The layout (little-endian; versions 2 and 3 differ from 1 only in 64-bit counts):

    "GGUF" | u32 version | u64 tensor count | u64 metadata count
    metadata: string key | u32 value type | value            (strings: u64 length + UTF-8 bytes)
    tensors:  string name | u32 dims | u64 × dims | u32 ggml type | u64 offset into the data section
    padding to `general.alignment` (32 unless stated) | tensor data

Every read is bounds-checked, so a truncated or corrupt file gives a `GgufError` naming what was being read
and where, never an IndexError or a multi-gigabyte allocation."""

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMENSIONS = 4  # GGML_MAX_DIMS
# Sanity bounds for counts read from the file: far above any real model, far below what a corrupt count
# would make a loop or an allocation attempt.
MAX_TENSORS = 1_000_000
MAX_METADATA = 100_000

# Metadata value types (gguf's GGUFValueType)
_SCALARS = {  # type id: (struct format, python kind)
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9


class GgufError(ValueError):
    """A GGUF file that cannot be imported; the message says which file and why."""


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array: its element type and length (the elements of long arrays are not kept)."""

    element_type: int
    length: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]  # as GGUF stores it: innermost dimension first
    ggml_type: int
    offset: int  # from the start of the data section

    @property
    def elements(self) -> int:
        count = 1
        for dimension in self.shape:
            count *= dimension
        return count


@dataclass(frozen=True)
class GgufHeader:
    version: int
    metadata: dict  # key → int | float | bool | str | ArrayValue
    tensors: tuple[TensorEntry, ...]
    alignment: int
    data_offset: int  # where the data section starts in the file
    file_size: int


class _Cursor:
    def __init__(self, buffer, path: Path):
        self.buffer, self.path, self.position = buffer, path, 0

    def take(self, size: int, what: str) -> bytes:
        end = self.position + size
        if size < 0 or end > len(self.buffer):
            raise GgufError(
                f"{self.path.name}: truncated GGUF file: {what} at byte {self.position} needs {size} bytes, "
                f"the file has {len(self.buffer)}"
            )
        chunk = self.buffer[self.position : end]
        self.position = end
        return chunk

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        length = self.unpack("<Q", f"the length of {what}")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GgufError(f"{self.path.name}: corrupt GGUF file: {what} is not UTF-8") from None

    def value(self, value_type: int, what: str):
        if value_type in _SCALARS:
            return self.unpack(_SCALARS[value_type], what)
        if value_type == _STRING:
            return self.string(what)
        if value_type == _ARRAY:
            element_type = self.unpack("<I", f"the element type of {what}")
            length = self.unpack("<Q", f"the length of {what}")
            if element_type in _SCALARS:
                self.take(length * struct.calcsize(_SCALARS[element_type]), what)
            elif element_type == _STRING:
                for _ in range(length):
                    self.take(self.unpack("<Q", f"a string length in {what}"), what)
            else:  # nested arrays do not occur in model files
                raise GgufError(
                    f"{self.path.name}: corrupt GGUF file: {what} is an array of type {element_type}"
                )
            return ArrayValue(element_type, length)
        raise GgufError(f"{self.path.name}: corrupt GGUF file: {what} has unknown value type {value_type}")


def read_header(path) -> GgufHeader:
    """The header of the GGUF file at `path`; `GgufError` for anything else or a damaged file."""
    path = Path(path)
    if not path.is_file():
        raise GgufError(f"{path}: no such file")
    size = path.stat().st_size
    if size < len(MAGIC):
        raise GgufError(f"{path.name}: not a GGUF file ({size} bytes)")
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        return _parse(buffer, path, size)


def _parse(buffer, path: Path, size: int) -> GgufHeader:
    cursor = _Cursor(buffer, path)
    magic = cursor.take(4, "the magic")
    if magic != MAGIC:
        raise GgufError(f"{path.name}: not a GGUF file (it starts with {bytes(magic)!r}, not {MAGIC!r})")
    version = cursor.unpack("<I", "the version")
    if version not in SUPPORTED_VERSIONS:
        if struct.unpack(">I", struct.pack("<I", version))[0] in SUPPORTED_VERSIONS:
            raise GgufError(f"{path.name}: a big-endian GGUF file; only little-endian files are supported")
        raise GgufError(
            f"{path.name}: GGUF version {version} is not supported (supported: "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))})"
        )
    tensor_count = cursor.unpack("<Q", "the tensor count")
    metadata_count = cursor.unpack("<Q", "the metadata count")
    if tensor_count > MAX_TENSORS or metadata_count > MAX_METADATA:
        raise GgufError(
            f"{path.name}: corrupt GGUF file: it declares {tensor_count} tensors and {metadata_count} "
            "metadata entries"
        )
    metadata: dict = {}
    for index in range(metadata_count):
        key = cursor.string(f"metadata key {index}")
        value_type = cursor.unpack("<I", f"the type of {key}")
        metadata[key] = cursor.value(value_type, key)
    tensors = []
    for index in range(tensor_count):
        name = cursor.string(f"the name of tensor {index}")
        dimensions = cursor.unpack("<I", f"the dimensions of {name}")
        if not 1 <= dimensions <= MAX_DIMENSIONS:
            raise GgufError(f"{path.name}: corrupt GGUF file: tensor {name} has {dimensions} dimensions")
        shape = tuple(cursor.unpack("<Q", f"the shape of {name}") for _ in range(dimensions))
        ggml_type = cursor.unpack("<I", f"the type of {name}")
        offset = cursor.unpack("<Q", f"the offset of {name}")
        tensors.append(TensorEntry(name=name, shape=shape, ggml_type=ggml_type, offset=offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise GgufError(f"{path.name}: corrupt GGUF file: general.alignment is {alignment!r}")
    data_offset = -(-cursor.position // alignment) * alignment
    return GgufHeader(
        version=version,
        metadata=metadata,
        tensors=tuple(tensors),
        alignment=alignment,
        data_offset=data_offset,
        file_size=size,
    )
