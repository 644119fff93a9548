"""`tokendp tag`: find private spans in a text file or a JSONL of {"id", "text"}."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

import click

from tokendp.cli._common import library_errors
from tokendp.cli._console import console
from tokendp.errors import InvalidParameterError
from tokendp.text.documents import is_jsonl, read_documents
from tokendp.text.spans import Span
from tokendp.text.taggers import TAGGER_NAMES, get_tagger
from tokendp.text.taggers import tag as tag_text

COLOURS = {"PERSON": "red", "CODE": "magenta", "LOC": "green", "ORG": "blue", "DEM": "cyan",
           "OCCUPATION": "bright_cyan", "DATE": "yellow", "DURATION": "bright_green", "DATETIME": "yellow",
           "QUANTITY": "bright_yellow", "MISC": "bright_magenta"}
HTML_COLOURS = {"PERSON": "#f8b4b4", "CODE": "#e2b4f8", "LOC": "#b4f8c0", "ORG": "#b4d0f8",
                "DEM": "#b4f0f8", "OCCUPATION": "#b4e0e8", "DATE": "#f8ecb4", "DURATION": "#e8f8b4",
                "DATETIME": "#f8ecb4", "QUANTITY": "#f8d8b4", "MISC": "#d8d8d8"}


def _highlight_terminal(text: str, spans: list[Span]) -> str:
    parts, pos = [], 0
    for span in spans:
        parts.append(text[pos:span.start])
        style = COLOURS.get(span.label, "white")
        parts.append(click.style(text[span.start:span.end], fg=style, bold=True, underline=True))
        parts.append(click.style(f"[{span.label}]", fg=style, dim=True))
        pos = span.end
    parts.append(text[pos:])
    return "".join(parts)


def _highlight_html(text: str, spans: list[Span]) -> str:
    parts, pos = [], 0
    for span in spans:
        parts.append(html.escape(text[pos:span.start]))
        colour = HTML_COLOURS.get(span.label, "#eeeeee")
        title = f"{span.label} {span.score:.2f} {span.source}"
        parts.append(f'<mark style="background:{colour}" title="{html.escape(title)}">'
                     f"{html.escape(text[span.start:span.end])}<sup>{html.escape(span.label)}</sup></mark>")
        pos = span.end
    parts.append(html.escape(text[pos:]))
    return "".join(parts)


def _html_page(results: list[tuple[str, str, list[Span]]]) -> str:
    sections = "\n".join(f"<h2>{html.escape(doc_id)}</h2>\n<pre>{_highlight_html(text, spans)}</pre>"
                         for doc_id, text, spans in results)
    legend = " ".join(f'<mark style="background:{c}">{label}</mark>' for label, c in HTML_COLOURS.items())
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>tokendp tag</title>"
            "<style>pre{white-space:pre-wrap;font-family:sans-serif;line-height:1.6}"
            "sup{font-size:0.6em;opacity:0.7}</style></head>\n"
            f"<body><p>{legend}</p>\n{sections}\n</body></html>\n")


def _summary(spans: list[Span]) -> str:
    counts = Counter(s.label for s in spans)
    return ", ".join(f"{label} {n}" for label, n in sorted(counts.items())) or "no spans"


@click.command("tag", short_help="Find private spans (names, codes, places, dates, ...) in text or JSONL.")
@click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--tagger", "tagger_name", type=click.Choice(TAGGER_NAMES), default="auto", show_default=True,
              help="Which tagger finds the spans.")
@click.option("--json", "as_json", is_flag=True,
              help="Print spans as JSON (a list for a text file, one {id, spans} per line for JSONL).")
@click.option("--no-whole", "as_found", is_flag=True,
              help="auto only: spans as found, not widened to whole mentions, no generic-word drop or name "
                   "relabelling (the earlier behaviour; docs/tagging.md).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True, path_type=Path),
              help="Also write an HTML page with the spans highlighted.")
@library_errors
def tag(input_path: Path, tagger_name: str, as_json: bool, as_found: bool, html_path: Path | None) -> None:
    """Find private spans (PERSON, CODE, LOC, ORG, DEM, OCCUPATION, DATE, DURATION, QUANTITY, MISC) in INPUT.

    INPUT is a UTF-8 text file, or a .jsonl file with one {"id", "text"} object per line.

    Languages: the built-in taggers are built for English text. They are measured on English
    court judgments and letters, where they also find people's names written in Arabic, Hebrew,
    Devanagari, Chinese, Japanese, Korean, Cyrillic, Greek and extended Latin script. Text
    written in another language is not measured: only the patterns (dates, numbers, e-mails,
    IBANs, European addresses) are known to work there. Review the spans (--html) before relying
    on them (docs/tagging.md, "Languages").
    """
    if as_found and tagger_name != "auto":
        raise InvalidParameterError("--no-whole applies to the auto tagger only")
    # first: a missing optional package fails before any reading
    tagger = get_tagger(tagger_name, **({"whole": False} if as_found else {}))
    documents = read_documents(input_path)
    results = [(doc.id, doc.text, tag_text(doc.text, tagger=tagger)) for doc in documents]
    if as_json and is_jsonl(input_path):
        for doc_id, _, spans in results:
            click.echo(json.dumps({"id": doc_id, "spans": [s.to_dict() for s in spans]}, ensure_ascii=False))
    elif as_json:
        click.echo(json.dumps([s.to_dict() for s in results[0][2]], ensure_ascii=False, indent=2))
    else:
        for doc_id, text, spans in results:
            click.echo(click.style(f"== {doc_id}: {_summary(spans)} ==", bold=True))
            click.echo(_highlight_terminal(text, spans))
    if html_path is not None:
        html_path.write_text(_html_page(results), encoding="utf-8")
        if not console().quiet:
            click.echo(f"wrote {html_path}", err=True)
