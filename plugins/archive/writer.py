"""WarcArchive: a thread-safe WARC 1.1 writer with size rotation and crash-safe files."""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import re
import threading
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]
from warcio.statusandheaders import StatusAndHeaders  # type: ignore[import-untyped]
from warcio.warcwriter import WARCWriter  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.records import DownloadResult, HttpExchange

logger = logging.getLogger(__name__)

OPEN_SUFFIX = ".open"
"""A file being written ends so; only a finished file is named ``*.warc.gz``."""
_DROPPED_HEADERS = ("content-encoding", "transfer-encoding", "content-length")
"""Response headers that describe the bytes on the wire, which the archive does not hold:
the fetcher keeps the decoded payload. They are kept renamed ``X-Archive-Orig-…`` (as
pywb does) and ``Content-Length`` is set to the payload stored."""


def payload_digest(body: bytes) -> str:
    """The WARC ``WARC-Payload-Digest`` of a payload (``sha1:`` base32, as warcio writes)."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def complete_length(path: Path) -> int:
    """Bytes of ``path`` made of whole gzip members: what a kill left readable.

    Each WARC record is its own gzip member, so a file cut anywhere keeps every record
    before the cut; the member being written when the process died is dropped.
    """
    good = 0
    size = path.stat().st_size
    with open(path, "rb") as handle:
        while good < size:
            handle.seek(good)
            inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
            pos = good
            try:
                while not inflater.eof:
                    chunk = handle.read(65536)
                    if not chunk:
                        break
                    pos += len(chunk)
                    inflater.decompress(chunk, 1 << 20)
                    while inflater.unconsumed_tail and not inflater.eof:
                        inflater.decompress(inflater.unconsumed_tail, 1 << 20)
            except zlib.error:
                break
            if not inflater.eof:
                break
            good = pos - len(inflater.unused_data)
    return good


SERVER_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
"""The WARC 1.1 revisit profile of a ``304 Not Modified`` to a conditional request."""


@dataclass(frozen=True, slots=True)
class _Original:
    """Where a payload was first archived: a revisit record refers to it."""

    uri: str
    date: str
    digest: str = ""


class WarcArchive:
    """Writes WARC 1.1 records to rotated ``<prefix>-<time>-<n>.warc.gz`` files.

    Thread-safe: downloading threads call :meth:`write` at once; one lock keeps each
    request/response pair together in one file. Every record is flushed as it is
    written, so a killed process leaves the file being written as ``….warc.gz.open``
    holding whole records but a possibly cut last one; :meth:`recover` (at the next
    start) cuts it back to its whole records and renames it, or removes it when it
    holds no record beyond its ``warcinfo``. Finished files are never opened again.

    Args:
        folder: where the files go (the crawl's ``output_dir``).
        prefix: the start of every file name (only such files are read at start).
        max_file_bytes: a file is closed and a new one begun past this size.
        info: the ``warcinfo`` fields of every file.
    """

    def __init__(
        self, folder: Path, prefix: str, max_file_bytes: int, info: dict[str, str]
    ) -> None:
        self.folder = folder
        self.prefix = prefix
        self.max_file_bytes = max_file_bytes
        self.info = info
        self._lock = threading.Lock()
        self._handle: io.BufferedWriter | None = None
        self._path: Path | None = None
        self._writer: WARCWriter | None = None
        self._records_in_file = 0
        self._sequence = 0
        self._seen: dict[str, _Original] = {}
        """Payload digest -> first capture, over this crawl's finished files too."""
        self._by_uri: dict[str, _Original] = {}
        """URI -> its last capture with a payload (what a ``304`` to a refresh's
        conditional request revisits), over this crawl's finished files too."""
        self._pattern = re.compile(re.escape(prefix) + r"-\d{14}-\d{5}-(\d+)\.warc\.gz")
        self.written: list[Path] = []

    # -- start ---------------------------------------------------------------------
    def recover(self) -> None:
        """Finish or discard the ``.open`` files a killed run left, then learn the payload
        digests already archived (so a resumed crawl writes revisits for them)."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.iterdir()):
            name = path.name
            match = self._pattern.fullmatch(name.removesuffix(OPEN_SUFFIX))
            if name.endswith(OPEN_SUFFIX) and match and not _alive(int(match.group(1))):
                self._finish_left_over(path)
        for path in sorted(self.folder.iterdir()):
            if self._pattern.fullmatch(path.name):
                self._learn(path)

    def _finish_left_over(self, path: Path) -> None:
        length = complete_length(path)
        with open(path, "r+b") as handle:
            handle.truncate(length)
        records = self._count_records(path)
        if records <= 1:  # a warcinfo alone says nothing was archived
            path.unlink()
            logger.info("archive: removed %s (no record was finished in it)", path.name)
            return
        final = path.with_name(path.name[: -len(OPEN_SUFFIX)])
        os.replace(path, final)
        logger.info("archive: finished %s left by a stopped run (%d records)", final.name, records)

    @staticmethod
    def _count_records(path: Path) -> int:
        with open(path, "rb") as handle:
            return sum(1 for _ in ArchiveIterator(handle))

    def _learn(self, path: Path) -> None:
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                headers = record.rec_headers
                uri = headers.get_header("WARC-Target-URI")
                digest = headers.get_header("WARC-Payload-Digest")
                if record.rec_type == "revisit" and digest:
                    refers = headers.get_header("WARC-Refers-To-Target-URI")
                    date = headers.get_header("WARC-Refers-To-Date")
                    if refers and date:
                        self._by_uri[uri] = _Original(refers, date, digest)
                if record.rec_type != "response" or not digest:
                    continue
                original = _Original(uri, headers.get_header("WARC-Date"), digest)
                self._seen.setdefault(digest, original)
                self._by_uri[uri] = original

    # -- writing -------------------------------------------------------------------
    def write(self, result: DownloadResult) -> None:
        """Archive one response: a request record and a response (or revisit) record."""
        exchange = result.exchange
        if exchange is None or result.status is None:
            return  # no response came: nothing to archive
        request = _request_head(exchange)
        response = _response_head(exchange, result)
        digest = payload_digest(result.body)
        extra = {"WARC-Truncated": "length"} if result.truncated else {}
        with self._lock:
            writer = self._current_writer()
            if result.status == 304:
                record = self._not_modified(writer, exchange.url, response, extra)
                req = writer.create_warc_record(exchange.url, "request", http_headers=request)
                self._write_pair(writer, req, record)
                return
            original = self._seen.get(digest) if result.body else None
            if original is not None:
                record = writer.create_revisit_record(
                    exchange.url, digest, original.uri, original.date,
                    http_headers=response, warc_headers_dict=extra,
                )  # fmt: skip
            else:
                record = writer.create_warc_record(
                    exchange.url, "response", payload=io.BytesIO(result.body),
                    length=len(result.body), http_headers=response, warc_headers_dict=extra,
                )  # fmt: skip
                if result.body:
                    self._seen[digest] = _Original(
                        exchange.url, record.rec_headers.get_header("WARC-Date"), digest
                    )
            if result.status == 200 and result.body:
                self._by_uri[exchange.url] = original or self._seen[digest]
            req = writer.create_warc_record(exchange.url, "request", http_headers=request)
            self._write_pair(writer, req, record)

    def _not_modified(
        self, writer: WARCWriter, uri: str, response: StatusAndHeaders, extra: dict[str, str]
    ) -> object:
        """The ``revisit`` record of a ``304 Not Modified`` (server-not-modified profile),
        referring to the URI's last capture with a payload when this crawl archived one."""
        headers = {**extra, "WARC-Profile": SERVER_NOT_MODIFIED}
        original = self._by_uri.get(uri)
        if original is not None:
            headers |= {
                "WARC-Refers-To-Target-URI": original.uri,
                "WARC-Refers-To-Date": original.date,
                "WARC-Payload-Digest": original.digest,
            }
        return writer.create_warc_record(
            uri, "revisit", http_headers=response, warc_headers_dict=headers
        )

    def _write_pair(self, writer: WARCWriter, request: object, record: object) -> None:
        """Write a request and its response (or revisit) record, flushed (lock held)."""
        writer.write_request_response_pair(request, record)
        self._records_in_file += 2
        assert self._handle is not None
        self._handle.flush()
        if self._handle.tell() >= self.max_file_bytes:
            self._close_file()

    def _current_writer(self) -> WARCWriter:
        if self._writer is not None:
            return self._writer
        self.folder.mkdir(parents=True, exist_ok=True)
        while True:
            self._sequence += 1
            stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
            name = f"{self.prefix}-{stamp}-{self._sequence:05d}-{os.getpid()}.warc.gz"
            path = self.folder / name
            if not path.exists() and not path.with_name(name + OPEN_SUFFIX).exists():
                break
        self._path = path
        # "x": never write over a file, ours or anyone's.
        self._handle = open(path.with_name(name + OPEN_SUFFIX), "xb")  # noqa: SIM115
        self._writer = WARCWriter(self._handle, gzip=True, warc_version="1.1")
        self._writer.write_record(self._writer.create_warcinfo_record(name, self.info))
        self._records_in_file = 1
        return self._writer

    def _close_file(self) -> None:
        if self._handle is None or self._path is None:
            return
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        os.replace(self._path.with_name(self._path.name + OPEN_SUFFIX), self._path)
        self.written.append(self._path)
        self._handle = self._writer = self._path = None

    def close(self) -> None:
        """Finish the file being written (rename it to ``*.warc.gz``)."""
        with self._lock:
            self._close_file()


def _alive(pid: int) -> bool:
    """Whether the process that named a ``.open`` file still runs (several workers of
    a shared crawl may write into one output_dir; only a dead one's file is finished)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _request_head(exchange: HttpExchange) -> StatusAndHeaders:
    return StatusAndHeaders(
        f"{exchange.method} {exchange.target} {exchange.http_version}",
        list(exchange.request_headers),
        is_http_request=True,
    )


def _response_head(exchange: HttpExchange, result: DownloadResult) -> StatusAndHeaders:
    headers: list[tuple[str, str]] = []
    for name, value in exchange.response_headers:
        if name.lower() in _DROPPED_HEADERS:
            headers.append((f"X-Archive-Orig-{name}", value))
        else:
            headers.append((name, value))
    headers.append(("Content-Length", str(len(result.body))))
    status = f"{result.status} {exchange.reason}".rstrip()
    return StatusAndHeaders(status, headers, protocol=exchange.http_version)
