"""Export the wire models' JSON Schemas: ``python -m bus.ops.schemas [--check]``.

The files under ``schemas/`` are what harness authors and other languages read; a test
runs ``--check`` so a model change without regenerated files fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bus.core.models import EXPORTED_MODELS

SCHEMA_DIR = Path(__file__).resolve().parent.parent.parent / "schemas"


def rendered() -> dict[str, str]:
    out = {}
    for name, model in sorted(EXPORTED_MODELS.items()):
        schema = model.model_json_schema(by_alias=True)
        out[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """Names of schema files that differ from the models (or are missing)."""
    return [
        name
        for name, text in rendered().items()
        if not (directory / name).exists() or (directory / name).read_text() != text
    ]


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        (directory / name).write_text(text)
    return sorted(rendered())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = stale()
        if bad:
            print(
                "stale schemas (run python -m bus.ops.schemas): " + ", ".join(bad), file=sys.stderr
            )
            return 1
        return 0
    for name in write():
        print(f"wrote schemas/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
