"""The manifest a model directory made here carries: what it came from and the sha256 of every file in it,
so a cache can tell an intact directory from a damaged or stale one, and a registry row can name exactly
which bytes it serves."""

import hashlib
import json
from pathlib import Path

MANIFEST_NAME = "areal-model.json"
MANIFEST_FORMAT = 1
_CHUNK = 1 << 20


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def directory_checksums(model_dir) -> dict[str, str]:
    """sha256 of every file directly in model_dir except the manifest, by name."""
    return {
        entry.name: file_sha256(entry)
        for entry in sorted(Path(model_dir).iterdir())
        if entry.is_file() and entry.name != MANIFEST_NAME
    }


def write_manifest(model_dir, *, source: dict) -> dict:
    """Writes the manifest of model_dir (its files' checksums and `source`) and returns it."""
    manifest = {
        "format": MANIFEST_FORMAT,
        "source": source,
        "files": directory_checksums(model_dir),
    }
    (Path(model_dir) / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(model_dir) -> dict | None:
    """The manifest of model_dir, or None when it has none (or an unreadable one)."""
    try:
        manifest = json.loads((Path(model_dir) / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else None


def manifest_problems(model_dir) -> list[str]:
    """What differs between model_dir and its manifest (missing, extra or changed files); [] when intact."""
    manifest = read_manifest(model_dir)
    if manifest is None:
        return [f"{model_dir} has no readable {MANIFEST_NAME}"]
    recorded: dict = manifest["files"]
    present = {
        entry.name for entry in Path(model_dir).iterdir() if entry.is_file() and entry.name != MANIFEST_NAME
    }
    problems = [f"{name} is missing" for name in sorted(set(recorded) - present)]
    problems += [f"{name} is not in the manifest" for name in sorted(present - set(recorded))]
    problems += [
        f"{name} changed (sha256 differs)"
        for name in sorted(present & set(recorded))
        if file_sha256(Path(model_dir) / name) != recorded[name]
    ]
    return problems
