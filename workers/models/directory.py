"""A Hugging Face model directory brought in as it is (no conversion): what it must hold to be served and
trained here, and its copy into the registry's storage. No Django here: apps/training/registration.py
decides where a directory may come from and registers the copy.

Served and trained here means: `config.json` (a JSON object), weights as safetensors (pickled `.bin` weights
are refused: loading them can run code), a fast tokenizer (`tokenizer.json`) and a chat template (in
`tokenizer_config.json` or `chat_template.jinja`). Only the directory's own regular files count and are
copied; a link anywhere in the tree is refused (it could point anywhere on the machine), subdirectories are
left out. The copy reads the source through directory descriptors and never follows a link, and what is
checked is the copy, never the source, which may change while it is read (copy_model_directory).
"""

import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from workers.models.manifest import MANIFEST_NAME, write_manifest
from workers.models.templates import read_chat_template

WEIGHTS_SUFFIX = ".safetensors"
PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def model_directory_problems(model_dir, *, max_weight_bytes: int) -> list[str]:
    """Why `model_dir` cannot be registered as it is, one sentence each; [] when it can."""
    model_dir = Path(model_dir)
    if model_dir.is_symlink() or not model_dir.is_dir():
        return ["is not a directory"]
    entries = sorted(model_dir.iterdir())
    links = [entry.name for entry in entries if entry.is_symlink()]
    if links:
        return [f"holds links ({', '.join(links[:5])}); copy the files themselves in"]
    files = {entry.name: entry for entry in entries if entry.is_file()}
    problems = []
    try:
        config = json.loads(files["config.json"].read_text()) if "config.json" in files else None
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        problems.append("has no readable config.json")
    weights = [entry for name, entry in files.items() if name.endswith(WEIGHTS_SUFFIX)]
    if not weights:
        pickled = [name for name in files if name.endswith(PICKLED_WEIGHTS)]
        problems.append(
            "has no safetensors weights"
            + (f" ({', '.join(pickled[:3])} are pickled weights, which are refused)" if pickled else "")
        )
    elif sum(entry.stat().st_size for entry in weights) > max_weight_bytes:
        problems.append(f"holds more than {max_weight_bytes:,} bytes of weights")
    if "tokenizer.json" not in files:
        problems.append("has no tokenizer.json (a fast tokenizer)")
    if read_chat_template(model_dir) is None:
        problems.append(
            "has no chat template (tokenizer_config.json's chat_template, or chat_template.jinja)"
        )
    return problems


def copy_model_directory(
    root, out_dir, *, source: dict, relative: tuple[str, ...] = (), max_bytes: int | None = None
) -> dict:
    """Copies a model directory's regular files (not its manifest) to `out_dir` and writes a manifest there
    naming `source` and every copied file's sha256; returns the manifest. Nothing of the source is opened by
    name twice: `root` is opened once (the caller trusts its path), each name of `relative` below it and each
    file is opened through its parent's descriptor without following a link, and each file's bytes are read
    from the descriptor that was checked. A link anywhere in the tree (in `relative`, among the files, or in a
    subdirectory, which is not copied) refuses the whole directory, as do more than `max_bytes` in all:
    ModelDirectoryRefused with the reasons, and nothing is left behind. Check what the copy holds
    (model_directory_problems on `out_dir`), not the source: the source may change at any moment.
    Written under a temporary name beside out_dir and renamed at the end. Refuses an existing out_dir
    (FileExistsError)."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists already")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep a server running as another user out
    try:
        directory = open_model_directory(root, relative)
        try:
            _copy_files(directory, staging, max_bytes=max_bytes)
        finally:
            os.close(directory)
        manifest = write_manifest(staging, source=source)
        os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


class ModelDirectoryRefused(ValueError):
    """A source directory that is not copied; `problems` says why, one sentence each (as
    model_directory_problems words them)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO cannot hang us
_MAX_TREE_ENTRIES = 10_000
_MAX_TREE_DEPTH = 16
_CHUNK = 1 << 20


def open_model_directory(root, relative: tuple[str, ...] = ()) -> int:
    """A descriptor of the directory `relative` names below `root`: `root` is opened as it is named, then each
    name of `relative` through its parent's descriptor, never following a link. ModelDirectoryRefused when a
    name is a link, or not a directory, or missing; the caller closes the descriptor."""
    try:
        descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (OSError, ValueError):
        raise ModelDirectoryRefused(["is not a directory"]) from None
    for name in relative:
        try:
            if name in ("", ".", "..") or "/" in name:
                raise ValueError(name)
            child = os.open(name, _DIRECTORY_FLAGS, dir_fd=descriptor)
        except OSError as error:
            link = error.errno == errno.ELOOP or _is_link(name, parent=descriptor)
            os.close(descriptor)
            if link:
                raise ModelDirectoryRefused(
                    [f"is reached through a link ({name}); name the directory itself"]
                ) from None
            raise ModelDirectoryRefused(["is not a directory"]) from None
        except ValueError:
            os.close(descriptor)
            raise ModelDirectoryRefused(["is not a directory"]) from None
        os.close(descriptor)
        descriptor = child
    return descriptor


def _is_link(name: str, *, parent: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except (OSError, ValueError):
        return False


def _copy_files(directory: int, staging: Path, *, max_bytes: int | None) -> None:
    with os.scandir(directory) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    links = [entry.name for entry in entries if entry.is_symlink()]
    links += _links_below(directory, [e.name for e in entries if e.is_dir(follow_symlinks=False)])
    if links:
        raise ModelDirectoryRefused([f"holds links ({', '.join(links[:5])}); copy the files themselves in"])
    copied = 0
    for entry in entries:
        if entry.name == MANIFEST_NAME or not entry.is_file(follow_symlinks=False):
            continue
        try:
            handle = os.open(entry.name, _FILE_FLAGS, dir_fd=directory)
        except OSError as error:
            if error.errno == errno.ELOOP:  # it became a link since the scan
                raise ModelDirectoryRefused(
                    [f"holds links ({entry.name}); copy the files themselves in"]
                ) from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(handle).st_mode):  # it became something else since the scan
                continue
            os.set_blocking(handle, True)
            with open(staging / entry.name, "wb") as out:
                while chunk := os.read(handle, _CHUNK):
                    copied += len(chunk)
                    if max_bytes is not None and copied > max_bytes:
                        raise ModelDirectoryRefused([f"holds more than {max_bytes:,} bytes"])
                    out.write(chunk)
        finally:
            os.close(handle)


def _links_below(
    directory: int, names: list[str], *, depth: int = 0, seen: list[int] | None = None
) -> list[str]:
    """The links in the subdirectories `names` of `directory` and below (their paths relative to it), walked
    through descriptors without following links; a tree deeper or larger than the bounds is refused."""
    seen = seen if seen is not None else [0]
    links: list[str] = []
    for name in names:
        if depth >= _MAX_TREE_DEPTH:
            raise ModelDirectoryRefused([f"holds subdirectories more than {_MAX_TREE_DEPTH} deep"])
        try:
            child = os.open(name, _DIRECTORY_FLAGS, dir_fd=directory)
        except OSError as error:
            if error.errno == errno.ELOOP or _is_link(name, parent=directory):  # a link since the scan
                links.append(name)
                continue
            if error.errno == errno.ENOTDIR:  # a file since the scan: not copied, nothing to look into
                continue
            raise
        try:
            with os.scandir(child) as scan:
                entries = list(scan)
            seen[0] += len(entries)
            if seen[0] > _MAX_TREE_ENTRIES:
                raise ModelDirectoryRefused([f"holds more than {_MAX_TREE_ENTRIES:,} files and directories"])
            links += [f"{name}/{entry.name}" for entry in entries if entry.is_symlink()]
            below = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
            links += [f"{name}/{path}" for path in _links_below(child, below, depth=depth + 1, seen=seen)]
        finally:
            os.close(child)
    return links
