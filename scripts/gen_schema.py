#!/usr/bin/env python3
"""Write the policy spec's JSON Schema into the chart's ``values.schema.json``.

The schema of ``policy.spec`` is declared once, in ``webhook/policy/model/spec.py``
(``SPEC_SCHEMA``, built from the spec's types): the server checks every policy file against it,
and this script copies it into the chart, so that ``helm install`` refuses what the server would
refuse and the two cannot drift apart (docs/diagnostics.md). The rest of ``values.schema.json``
is the chart's own and is left as it is.

Run it with the project's virtualenv (``make .venv/.installed``), which has the package::

    .venv/bin/python scripts/gen_schema.py            # rewrite the chart's values.schema.json
    .venv/bin/python scripts/gen_schema.py --check    # exit 1 when the committed file differs

``--file PATH`` works on another copy of the file. Exit codes: 0 written or up to date, 1 the
file differs from what would be written (``--check``), 2 the file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from webhook.policy.model.spec import SPEC_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
CHART_SCHEMA = ROOT / "charts" / "gpu-policy-webhook" / "values.schema.json"


def with_spec(values_schema: dict[str, Any]) -> dict[str, Any]:
    """``values_schema`` with ``properties.policy.properties.spec`` replaced by the spec's."""
    out = json.loads(json.dumps(values_schema))
    out["properties"]["policy"]["properties"]["spec"] = SPEC_SCHEMA
    return out


def render(schema: dict[str, Any]) -> str:
    """The file's text: two-space JSON, as the chart's other files are written."""
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write, or with ``--check`` compare, the chart's values.schema.json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a change")
    parser.add_argument("--file", type=Path, default=CHART_SCHEMA, help="the file to work on")
    args = parser.parse_args(argv)
    try:
        text = args.file.read_text(encoding="utf-8")
        wanted = render(with_spec(json.loads(text)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"gen_schema: {args.file}: cannot read the chart's schema: {exc}", file=sys.stderr)
        return 2
    if text == wanted:
        print(f"{args.file}: up to date")
        return 0
    if args.check:
        print(
            f"{args.file}: policy.spec differs from webhook/policy/model/spec.py: run "
            "scripts/gen_schema.py and commit the file",
            file=sys.stderr,
        )
        return 1
    args.file.write_text(wanted, encoding="utf-8")
    print(f"{args.file}: policy.spec written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
