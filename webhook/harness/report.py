"""Reports of a harness run: failure details, the closing line, JUnit XML (the results table
is the command's: ``webhook.cli.test``).

JUnit XML is written with the standard library's ElementTree; nothing here parses XML, so
bandit's warning about parsing untrusted XML (B405) does not apply.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET  # nosec B405
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from webhook.harness.run import CaseResult
from webhook.harness.suite import Problem

# status -> (the word in reports, its ANSI colour)
STYLES: dict[str, tuple[str, str]] = {
    "pass": ("PASS", "32"),
    "fail": ("FAIL", "31"),
    "skip": ("SKIP", "33"),
    "error": ("ERROR", "35"),
}


def _paint(colour: bool, kind: str, text: str) -> str:
    return f"\033[{STYLES[kind][1]}m{text}\033[0m" if colour else text


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else as given."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)
    return str(path) if relative.startswith("..") else relative


def details(results: Sequence[CaseResult], *, colour: bool = False) -> str:
    """For every failed or errored case: where it is defined and what differed."""
    out: list[str] = []
    for r in results:
        if r.status not in ("fail", "error"):
            continue
        title = f"{STYLES[r.status][0]} {r.case.id}"
        out.append(
            f"{_paint(colour, r.status, title)}  "
            f"({display_path(r.case.path)}:{r.case.line}; object {r.case.source})"
        )
        for d in r.differences:
            out.append(f"  - {d.what}")
            for line in d.detail.splitlines():
                out.append(f"      {line}")
        out.append("")
    return "\n".join(out)


def summary(
    results: Sequence[CaseResult],
    *,
    deselected: int = 0,
    problems: int = 0,
    seconds: float | None = None,
    colour: bool = False,
) -> str:
    """The closing line: ``N passed, M failed, K skipped`` (+ errors, deselected, time)."""
    counts = Counter(r.status for r in results)
    parts = [
        _paint(colour and counts["pass"] > 0, "pass", f"{counts['pass']} passed"),
        _paint(colour and counts["fail"] > 0, "fail", f"{counts['fail']} failed"),
        f"{counts['skip']} skipped",
    ]
    if counts["error"]:
        parts.append(_paint(colour, "error", f"{counts['error']} errors"))
    if problems:
        parts.append(_paint(colour, "error", f"{problems} suite file errors"))
    if deselected:
        parts.append(f"{deselected} deselected")
    line = ", ".join(parts)
    if seconds is not None:
        line += f" in {seconds:.2f}s"
    return line


def junit_xml(
    results: Sequence[CaseResult],
    problems: Sequence[Problem] = (),
    *,
    seconds: float = 0.0,
    mode: str = "local",
) -> ET.ElementTree:
    """JUnit XML: a testsuite per suite, a testcase per case; suite file problems as errors."""
    root = ET.Element("testsuites", name="gpu-policy test")
    by_suite: dict[str, list[CaseResult]] = {}
    for r in results:
        by_suite.setdefault(f"{r.case.suite}\0{r.case.path}", []).append(r)
    for key, items in by_suite.items():
        name, path = key.split("\0", 1)
        counts = Counter(r.status for r in items)
        suite_el = ET.SubElement(
            root,
            "testsuite",
            name=name,
            file=display_path(Path(path)),
            tests=str(len(items)),
            failures=str(counts["fail"]),
            errors=str(counts["error"]),
            skipped=str(counts["skip"]),
            time=f"{sum(r.seconds for r in items):.3f}",
        )
        ET.SubElement(ET.SubElement(suite_el, "properties"), "property", name="mode", value=mode)
        for r in items:
            case_el = ET.SubElement(
                suite_el,
                "testcase",
                classname=f"gpu-policy.{name}",
                name=r.case.name,
                file=display_path(r.case.path),
                line=str(r.case.line),
                time=f"{r.seconds:.3f}",
            )
            if r.status == "skip":
                ET.SubElement(case_el, "skipped", message=r.skip_reason)
            elif r.status in ("fail", "error"):
                first = r.differences[0].what if r.differences else r.status
                tag = "failure" if r.status == "fail" else "error"
                el = ET.SubElement(case_el, tag, message=first, type=tag)
                el.text = "\n".join(
                    [d.what + ("\n" + d.detail if d.detail else "") for d in r.differences]
                )
    if problems:
        files: dict[str, list[Problem]] = {}
        for p in problems:
            files.setdefault(p.source, []).append(p)
        for path, items_p in files.items():
            suite_el = ET.SubElement(
                root,
                "testsuite",
                name=path,
                file=path,
                tests="1",
                failures="0",
                errors="1",
                skipped="0",
                time="0",
            )
            case_el = ET.SubElement(suite_el, "testcase", classname="gpu-policy", name=path)
            el = ET.SubElement(
                case_el, "error", message=f"the suite file cannot be used: {items_p[0]}"
            )
            el.text = "\n".join(str(p) for p in items_p)
    counts = Counter(r.status for r in results)
    root.set("tests", str(len(results) + len({p.source for p in problems})))
    root.set("failures", str(counts["fail"]))
    root.set("errors", str(counts["error"] + len({p.source for p in problems})))
    root.set("skipped", str(counts["skip"]))
    root.set("time", f"{seconds:.3f}")
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return tree


def write_junit(path: str | os.PathLike[str], tree: ET.ElementTree) -> None:
    """Write the JUnit document (UTF-8, with an XML declaration)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tree.write(path, encoding="utf-8", xml_declaration=True)
