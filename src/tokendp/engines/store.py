"""The resumable output of a corpus run: every output (a document's rewrite, a synthetic text)
written exactly once, none lost.

Layout. ``--out FILE.jsonl`` or ``FILE.parquet``: the run works in ``FILE.jsonl.parts/`` and,
when every document is done, assembles FILE in input order, records what made it in
``.FILE.jsonl.run.json`` beside it (``run.json`` with the SHA-256 of the ids and of FILE) and
removes the directory. ``--out DIR`` (any other name): DIR is the output, its part files stay
(records in completion order) and ``DIR/_SUCCESS`` marks a finished run.

A finished run, run again with the same job, parameters and input, is complete: nothing is
loaded or written (for FILE: only if FILE is still the file the run wrote). With other settings
it is refused, naming what differs, as a resume is.

The work directory holds:

- ``run.json``: the job and its parameters; a resume with other parameters is refused, so
  one output never mixes rewrites made under different settings (or guarantees). A job whose
  work was planned from its input (synthesize's batches of references) also records public
  facts about that input (``inputs``: the ids, in order), and a resume on another input is refused;
- ``part-NNNNN.jsonl``: one append-only log per session of the run, one ``{id, text, report}``
  record per line, flushed and fsynced after every batch;
- ``.lock``: an exclusive lock held while a run writes, so two runs never share a directory.

Diagnostics (``sanitize --diagnostics``: data-dependent, not covered by the guarantee) are never
in the output: each record's go to ``NAME.diagnostics.jsonl`` beside the output (for ``--out
FILE.jsonl``: ``FILE.diagnostics.jsonl``; for ``--out DIR``: ``DIR.diagnostics.jsonl``), one
``{id, diagnostics}`` per line in completion order, appended across the sessions of a run and
written before the records of the same batch; a document redone after a crash may appear twice,
its last line belonging to the rewrite that was kept.

Crashes. A record counts as written once its whole line (newline included) is on disk. On
start, each part is read back and cut at its first incomplete or unreadable line (the only
place a crash can leave one: the tail of the last write); the ids in the parts are the
documents done, which the run skips; the writer drops any id already written, so a document is
never written twice, even if an engine delivers it twice. The final file is written to a
temporary name, fsynced and renamed, so it is either absent or complete; a crash after the
rename and before the cleanup leaves the parts, and the next run assembles the same file again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from tokendp.engines.corpus import FORMATS
from tokendp.errors import InvalidInputError

RUN_FILE, LOCK_FILE, SUCCESS_FILE = "run.json", ".lock", "_SUCCESS"
_CHUNK = 1 << 20
log = logging.getLogger(__name__)


class Outputs(Protocol):
    """What a run writes: ``ids``, one per output in output order, planned from the input ``path``
    (a :class:`~tokendp.engines.corpus.Corpus`: its documents)."""

    path: Path
    ids: Sequence[str | int]


@dataclass(frozen=True)
class OutputRecord:
    """A finished document: its id, its output line (``{id, text, report}`` as JSON) and, only
    when asked for, its diagnostics line (``{id, diagnostics}``), which is kept apart."""

    id: str | int
    line: str
    diagnostics: str | None = None


class MemorySink:
    """Output without a file (stdout): records kept in memory, nothing to resume."""

    def __init__(self) -> None:
        self.done: set[str | int] = set()
        self._lines: dict[str | int, str] = {}
        self._diagnostics: dict[str | int, str] = {}

    def write(self, records: Sequence[OutputRecord]) -> int:
        new = [r for r in records if r.id not in self.done]
        self._lines.update((r.id, r.line) for r in new)
        self._diagnostics.update((r.id, r.diagnostics) for r in new if r.diagnostics is not None)
        self.done.update(r.id for r in new)
        return len(new)

    def lines(self, outputs: Outputs) -> list[str]:
        """The output lines in output order."""
        return [self._lines[i] for i in outputs.ids]

    def diagnostics(self, outputs: Outputs) -> list[str] | None:
        """The diagnostics lines in output order, or None if no record carried any."""
        return [self._diagnostics[i] for i in outputs.ids if i in self._diagnostics] if self._diagnostics else None


class RunStore:
    """The work directory of one run (see the module docstring). Use as a context manager."""

    def __init__(self, out: str | Path, corpus: Outputs, run: dict[str, Any]) -> None:
        self.out = Path(out)
        self.final_format = FORMATS.get(self.out.suffix.lower())
        self.work = Path(f"{self.out}.parts") if self.final_format else self.out
        self.diagnostics_path = diagnostics_path(self.out)
        self.corpus, self.run = corpus, run
        self._expected = set(corpus.ids)
        self.done: set[str | int] = set()
        self.complete = False  # a finished run found finished again: nothing to do, nothing written
        self._lock: BinaryIO | None = None
        self._part: BinaryIO | None = None
        self._diagnostics: BinaryIO | None = None

    # ------------------------------------------------------------------ opening
    def __enter__(self) -> RunStore:
        if self.final_format and self.out.exists() and not self.work.exists():
            self._check_finished()
            self.done, self.complete = set(self._expected), True
            return self
        if self.work.exists() and not self.work.is_dir():
            raise InvalidInputError(f"{self.work} exists and is not a directory; choose another --out")
        if self.work.is_dir() and not (self.work / RUN_FILE).exists() and any(
                p.name != LOCK_FILE for p in self.work.iterdir()):
            raise InvalidInputError(f"{self.work} is not empty and holds no tokendp run; choose another --out")
        if self.diagnostics_path.exists() and not (self.work / RUN_FILE).exists():
            raise InvalidInputError(f"{self.diagnostics_path} already exists and belongs to no run in {self.work}; "
                                    "delete it or choose another --out")
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            self._take_lock()
            self._check_run_file()
            for part in self._parts():
                self.done.update(_recover(part, self._expected))
            self.complete = self.final_format is None and (self.work / SUCCESS_FILE).exists() and \
                self.done == self._expected
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for fh in (self._part, self._diagnostics, self._lock):
            if fh is not None:
                fh.close()
        self._part = self._diagnostics = self._lock = None

    def _take_lock(self) -> None:
        self._lock = open(self.work / LOCK_FILE, "ab")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise InvalidInputError(f"another run is writing to {self.work}; wait for it or choose another --out") from None

    def _check_run_file(self) -> None:
        path = self.work / RUN_FILE
        if not path.exists():
            _write_atomic(path, json.dumps(self.run, indent=2, sort_keys=True).encode())
            return
        before = json.loads(path.read_text(encoding="utf-8"))
        if before.get("inputs") != self.run.get("inputs"):
            raise InvalidInputError(f"{self.corpus.path} is not the input the run in {self.work} began with (its ids, "
                                    "their order or their number differ), and that run's work was planned from it; "
                                    "resume with the same input, or choose another --out")
        if before != self.run:
            raise InvalidInputError(f"{self.work} holds a run with other settings ({_differ(before, self.run)} "
                                    "differ); resume with the same options, or choose another --out")

    def _check_finished(self) -> None:
        """``out`` exists and no run works on it: it must be the file a finished run of this job,
        these parameters and this input wrote (its record beside it), else it is refused."""
        record = finished_path(self.out)
        try:
            finished = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            finished = None
        if not isinstance(finished, dict) or finished.get("output_sha256") != _sha256_file(self.out):
            raise InvalidInputError(f"{self.out} already exists; delete it or choose another --out")
        if finished.get("ids_sha256") != _ids_sha256(self.corpus.ids) or \
                finished.get("run", {}).get("inputs") != self.run.get("inputs"):
            raise InvalidInputError(f"{self.out} already exists and was written from another input than "
                                    f"{self.corpus.path} (its ids, their order or their number differ); delete it "
                                    "or choose another --out")
        if finished.get("run") != self.run:
            raise InvalidInputError(f"{self.out} already exists and was written by a run with other settings "
                                    f"({_differ(finished.get('run', {}), self.run)} differ); delete it or choose "
                                    "another --out")

    def _parts(self) -> list[Path]:
        return sorted(self.work.glob("part-*.jsonl"))

    # ------------------------------------------------------------------ writing
    def write(self, records: Sequence[OutputRecord]) -> int:
        """Append the records not yet written, flush and fsync; return how many were new."""
        new, seen = [], set()
        for rec in records:
            if rec.id not in self._expected:
                raise InvalidInputError(f"the engine returned id {json.dumps(rec.id)}, which is not an output of "
                                        f"this run on {self.corpus.path} (was it changed during the run?)")
            if rec.id not in self.done and rec.id not in seen:
                new.append(rec)
                seen.add(rec.id)
        if new:
            self._write_diagnostics([rec.diagnostics for rec in new if rec.diagnostics is not None])
            part = self._open_part()
            part.write(b"".join(rec.line.encode("utf-8") + b"\n" for rec in new))
            part.flush()
            os.fsync(part.fileno())
            self.done.update(seen)
        return len(new)

    def _write_diagnostics(self, lines: Sequence[str]) -> None:
        """Append diagnostics lines to their own file, fsynced before the batch's records."""
        if not lines:
            return
        if self._diagnostics is None:
            self._diagnostics = open(self.diagnostics_path, "ab")
        self._diagnostics.write(b"".join(line.encode("utf-8") + b"\n" for line in lines))
        self._diagnostics.flush()
        os.fsync(self._diagnostics.fileno())

    def _open_part(self) -> BinaryIO:
        if self._part is None:
            numbers = [int(p.stem.split("-")[1]) for p in self._parts()]
            path = self.work / f"part-{max(numbers, default=-1) + 1:05d}.jsonl"
            self._part = open(path, "ab")
            _fsync_dir(self.work)
        return self._part

    # ------------------------------------------------------------------ finishing
    def finish(self) -> Path | None:
        """If every document is done: write the final output and return its path, else None."""
        if self.done != self._expected:
            return None
        if self.complete:
            return self.out
        if self._part is not None:
            self._part.close()
            self._part = None
        if self.final_format is None:
            _write_atomic(self.work / SUCCESS_FILE, b"")
            return self.work
        tmp = self.out.with_name(f".{self.out.name}.tmp")
        _assemble(self._parts(), self.corpus.ids, tmp, self.final_format)
        os.replace(tmp, self.out)
        _fsync_dir(self.out.parent)
        # Before the work directory goes: a crash in between assembles the same file again.
        finished = {"run": self.run, "ids_sha256": _ids_sha256(self.corpus.ids),
                    "output_sha256": _sha256_file(self.out)}
        _write_atomic(finished_path(self.out), json.dumps(finished, indent=2, sort_keys=True).encode())
        shutil.rmtree(self.work)
        return self.out


def diagnostics_path(out: str | Path) -> Path:
    """Where a run's diagnostics go, beside its output and never inside it: ``NAME.diagnostics.jsonl``
    for ``--out NAME.jsonl`` or ``NAME.parquet``, ``DIR.diagnostics.jsonl`` for ``--out DIR``."""
    out = Path(out)
    stem = out.stem if out.suffix.lower() in FORMATS else out.name
    return out.with_name(f"{stem}.diagnostics.jsonl")


def finished_path(out: str | Path) -> Path:
    """Where a finished ``--out FILE`` run records what made FILE: ``.FILE.run.json`` beside it."""
    out = Path(out)
    return out.with_name(f".{out.name}.run.json")


def _differ(before: dict[str, Any], now: dict[str, Any]) -> str:
    """The parameters that differ between two runs (or "the job")."""
    a, b = before.get("parameters", {}), now.get("parameters", {})
    return ", ".join(sorted(k for k in {*a, *b} if a.get(k) != b.get(k))) or "the job"


def _ids_sha256(ids: Sequence[str | int]) -> str:
    """The ids in order as JSON (so ``7`` and ``"7"`` differ), hashed: public, like the ids."""
    return hashlib.sha256(json.dumps(list(ids), ensure_ascii=False).encode()).hexdigest()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------- part files
def _recover(part: Path, expected: set) -> set[str | int]:
    """The ids of ``part``'s complete records; cut the file at its first incomplete line."""
    ids, good = set(), 0
    with open(part, "rb") as fh:
        for line in fh:
            doc_id = _line_id(line)
            if doc_id is None:
                break
            if doc_id not in expected:
                raise InvalidInputError(f"{part} holds id {json.dumps(doc_id)}, which is not an output of this run; "
                                        "resume with the same input, or choose another --out")
            ids.add(doc_id)
            good += len(line)
    if good < part.stat().st_size:
        with open(part, "r+b") as fh:
            fh.truncate(good)
            os.fsync(fh.fileno())
        log.warning("%s: dropped an incomplete record at the end (it will be redone)", part.name)
    return ids


def _line_id(line: bytes) -> str | int | None:
    """The id of a complete record line, or None if the line is incomplete or unreadable."""
    if not line.endswith(b"\n"):
        return None
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec.get("id") if isinstance(rec, dict) and {"id", "text", "report"} <= rec.keys() else None


def _index(parts: Sequence[Path]) -> dict[str | int, tuple[int, int, int]]:
    """id -> (part number, offset, length) of its first record."""
    index: dict[str | int, tuple[int, int, int]] = {}
    for p, part in enumerate(parts):
        offset = 0
        with open(part, "rb") as fh:
            for line in fh:
                index.setdefault(_line_id(line), (p, offset, len(line)))
                offset += len(line)
    return index


def _ordered_lines(parts: Sequence[Path], ids: Iterable[str | int]) -> Iterator[bytes]:
    """Every record line, in the order of ``ids``."""
    index = _index(parts)
    handles = [open(part, "rb") for part in parts]
    try:
        for doc_id in ids:
            p, offset, length = index[doc_id]
            handles[p].seek(offset)
            yield handles[p].read(length)
    finally:
        for fh in handles:
            fh.close()


def _assemble(parts: Sequence[Path], ids: Sequence[str | int], tmp: Path, fmt: str) -> None:
    """Write the final output (JSONL or Parquet) in input order to ``tmp``, fsynced."""
    lines = _ordered_lines(parts, ids)
    if fmt == "jsonl":
        with open(tmp, "wb") as fh:
            for line in lines:
                fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
    else:
        _write_parquet(lines, tmp)


def _write_parquet(lines: Iterator[bytes], path: Path, rows_per_group: int = 1024) -> None:
    """Columns id, text and report (the report as JSON text, as in the JSONL records)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    try:
        while chunk := [json.loads(line) for _, line in zip(range(rows_per_group), lines)]:
            table = pa.table({"id": [r["id"] for r in chunk], "text": [r["text"] for r in chunk],
                              "report": [json.dumps(r["report"], ensure_ascii=False) for r in chunk]})
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
