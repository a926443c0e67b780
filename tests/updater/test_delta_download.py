"""The updater's download: range requests against a real HTTP server (the simulation's repo
server, which answers Range as nginx does), resumed after cuts and across runs, checked
against the signed index's size and sha256 before anything applies it."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from builder.core.errors import BuildError
from builder.core.http_thread import ServedInThread
from builder.device.repo_server import RepoServer
from builder.updater.delta_download import STATE, SYNC_EVERY, Download, Limits
from builder.updater.fetch import Patience
from builder.updater.index import DeltaFile, UpdateRefused

FROM, TO = "a" * 64, "b" * 64
NAME = f"{FROM}-{TO}.delta"
SIZE = 1_000_003


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo/config").write_text("[core]\nrepo_version=1\nmode=archive-z2\n")
    (tmp_path / "updates").mkdir()
    (tmp_path / "updates" / NAME).write_bytes(os.urandom(SIZE))
    return tmp_path


def _delta(site: Path, **changes: object) -> DeltaFile:
    data = (site / "updates" / NAME).read_bytes()
    fields = {"file": NAME, "from_commit": FROM, "to_commit": TO, "size": len(data),
              "sha256": hashlib.sha256(data).hexdigest(), **changes}
    return DeltaFile(**fields)  # type: ignore[arg-type]


def _server(site: Path) -> RepoServer:
    return RepoServer(site / "repo", updates=site / "updates")


def _download(site: Path, server: RepoServer, delta: DeltaFile, **limits: float) -> Download:
    url = server.url.removesuffix("repo/") + "updates/" + NAME
    download = Download(site / "staging", url, delta, Limits(**{"retry_delay": 0, **limits}),
                        lambda done, total: download.reports.append((done, total)))
    download.reports = []  # type: ignore[attr-defined]
    return download


def test_five_cuts_resume_from_the_last_byte_and_nothing_is_sent_twice(site: Path) -> None:
    delta = _delta(site)
    with _server(site) as server:
        server.cut_delta_at([1, 65_536, 400_000, 400_001, SIZE - 1])
        download = _download(site, server, delta)
        path = download.run()
        stats = server.stats
    assert path.read_bytes() == (site / "updates" / NAME).read_bytes()
    assert download.transfer.interruptions == 5 and download.transfer.requests == 6
    assert stats.cut_transfers == 5
    assert stats.duplicate_delta_bytes() == 0
    # What `microshift-update status` shows: from the staged bytes up to the whole file.
    reports = download.reports  # type: ignore[attr-defined]
    assert reports[0] == (0, SIZE) and reports[-1] == (SIZE, SIZE)
    assert all(total == SIZE for _, total in reports)
    assert [done for done, _ in reports] == sorted(done for done, _ in reports)
    assert {400_000, 400_001} <= {done for done, _ in reports}  # reported at each cut
    assert sum(length for _, _, length in stats.delta_ranges) == SIZE == stats.body_bytes
    assert not (site / "staging" / (NAME + ".part")).exists()


def test_a_later_run_resumes_what_an_earlier_one_staged(site: Path) -> None:
    delta = _delta(site)
    with _server(site) as server:
        server.cut_delta_at([300_000, 300_001])
        # The first cut leaves 300000 bytes; the resume gets one more before the second.
        with pytest.raises(BuildError) as caught:
            _download(site, server, delta, retries=1).run()
        assert str(caught.value) == (
            f"download of {NAME} cut 2 times, 300001 of 1000003 bytes staged: connection "
            "closed after byte 300001 (hint: the next run resumes from the last byte)")
        assert caught.value.hint == "the next run resumes from the last byte"
        assert (site / "staging" / (NAME + ".part")).stat().st_size == 300_001
        second = _download(site, server, delta)
        second.run()
        stats = server.stats
    assert second.transfer.resumed_from == 300_001
    assert second.transfer.received == SIZE - 300_001
    assert stats.duplicate_delta_bytes() == 0


@pytest.mark.parametrize("record", [
    {"url": "http://elsewhere/", "sha256": "0" * 64},  # a part of another file
    None,                                               # download.json is missing
])
def test_a_part_not_recorded_as_this_file_is_discarded_not_resumed(
        site: Path, record: dict[str, str] | None) -> None:
    staging = site / "staging"
    staging.mkdir()
    (staging / (NAME + ".part")).write_bytes(b"x" * 1000)
    if record is not None:
        (staging / STATE).write_text(json.dumps(record))
    with _server(site) as server:
        download = _download(site, server, _delta(site))
        path = download.run()
    assert download.transfer.resumed_from == 0
    assert path.read_bytes() == (site / "updates" / NAME).read_bytes()


def test_a_file_that_differs_from_the_index_is_refused_and_removed(site: Path) -> None:
    delta = _delta(site, sha256="0" * 64)
    with _server(site) as server, pytest.raises(UpdateRefused) as caught:
        _download(site, server, delta).run()
    actual = hashlib.sha256((site / "updates" / NAME).read_bytes()).hexdigest()
    assert str(caught.value) == (
        f"{NAME}: 1000003 bytes with sha256 {actual[:16]}..., the signed index says 1000003 "
        "bytes with 0000000000000000... (hint: the staged copy was removed; the next run "
        "downloads it again)")
    assert not any((site / "staging").glob("*.delta*"))


def test_a_server_longer_than_the_index_is_refused(site: Path) -> None:
    delta = _delta(site, size=SIZE - 10)
    with _server(site) as server, pytest.raises(UpdateRefused, match="more than the index"):
        _download(site, server, delta).run()


def test_the_bandwidth_cap_holds(site: Path) -> None:
    """A cap of 1/5 of the file per second: the download takes about five seconds. The
    ratio's bound is generous (the machine is shared); what matters is that the cap holds."""
    delta = _delta(site)
    with _server(site) as server:
        started = time.monotonic()
        _download(site, server, delta, bytes_per_second=SIZE // 5).run()
        seconds = time.monotonic() - started
    assert seconds >= 5 * 0.95


def test_a_server_that_ignores_range_restarts_from_zero(site: Path, tmp_path: Path) -> None:
    """Some servers answer 200 with the whole file to a range request: the part is then
    replaced, never appended to."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = (site / "updates" / NAME).read_bytes()

    answers: list[int] = []

    class Whole(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answers.append(200)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # The first answer is cut half-way: the resume is ignored again.
            self.wfile.write(body if len(answers) > 1 else body[:len(body) // 2])

        def log_message(self, *args: object) -> None:
            pass

    staging = site / "staging"
    staging.mkdir()
    with ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), Whole), "whole") as served:
        url = f"{served.url}/{NAME}"
        (staging / STATE).write_text(json.dumps(_delta(site).__dict__, sort_keys=True) + "\n")
        (staging / (NAME + ".part")).write_bytes(body[:5000])
        download = Download(staging, url, _delta(site), Limits(retry_delay=0.0),
                            lambda done, total: None)
        path = download.run()
    assert download.transfer.resumed_from == 5000 and download.transfer.restarts == 2
    assert download.transfer.interruptions == 1 and len(answers) == 2
    assert path.read_bytes() == body


class Ranged:
    """A server that answers every range with 206 and the Content-Range it is given."""

    def __init__(self, body: bytes, content_range: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
                self.send_response(206)
                if content_range:
                    self.send_header("Content-Range", content_range.format(
                        start=start, end=len(body) - 1, size=len(body)))
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                self.wfile.write(body[start:])

            def log_message(self, *args: object) -> None:
                pass

        self.served = ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), Handler), "ranged")
        self.served.__enter__()
        self.url = f"{self.served.url}/{NAME}"

    def close(self) -> None:
        self.served.__exit__()


@pytest.mark.parametrize(("content_range", "accepted"), [
    ("bytes {start}-{end}/{size}", True),
    ("", False),                               # no Content-Range at all
    ("bytes {start}-{end}/*", True),           # the total may be unknown to the server
    ("bytes 0-{end}/{size}", False),           # another start than asked for
    ("bytes {start}-{end}/999", False),        # another file's length
    ("items {start}-{end}/{size}", False),
])
def test_a_partial_answer_must_continue_the_staged_bytes(site: Path, content_range: str,
                                                         accepted: bool) -> None:
    body = (site / "updates" / NAME).read_bytes()
    staging = site / "staging"
    staging.mkdir()
    (staging / STATE).write_text(json.dumps(_delta(site).__dict__, sort_keys=True) + "\n")
    (staging / (NAME + ".part")).write_bytes(body[:5000])
    server = Ranged(body, content_range)
    download = Download(staging, server.url, _delta(site), Limits(retry_delay=0.0),
                        lambda done, total: None)
    try:
        if accepted:
            assert download.run().read_bytes() == body
            return
        with pytest.raises(UpdateRefused) as caught:
            download.run()
    finally:
        server.close()
    header = content_range.format(start=5000, end=SIZE - 1, size=SIZE)
    assert str(caught.value) == (f"GET {server.url}: Content-Range {header!r} does not "
                                 f"continue byte 5000 of a {SIZE}-byte file")


def test_retries_wait_longer_each_time(site: Path) -> None:
    delta = _delta(site)
    with _server(site) as server:
        server.cut_delta_at([100_000, 200_000, 300_000])
        started = time.monotonic()
        _download(site, server, delta, retry_delay=0.2).run()
        seconds = time.monotonic() - started
    assert seconds >= 0.2 + 0.4 + 0.6  # a lower bound only: never too fast


def test_a_server_that_stops_answering_is_a_cut_not_a_hang(site: Path) -> None:
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/{NAME}"
        download = Download(site / "staging", url, _delta(site),
                            Limits(retries=0, retry_delay=0.0, patience=Patience(timeout=1.0)),
                            lambda done, total: None)
        with pytest.raises(BuildError) as caught:
            download.run()
    assert str(caught.value).startswith(f"download of {NAME} cut 1 times, 0 of {SIZE} bytes "
                                        "staged: ")
    assert "no complete answer within 1 s (timeout_seconds)" in str(caught.value)


def test_progress_is_reported_at_every_sync(site: Path) -> None:
    """The part is fsynced and its progress reported every 4 MiB, and at the end."""
    size = 2 * SYNC_EVERY + 12_345
    (site / "updates" / NAME).write_bytes(os.urandom(size))
    with _server(site) as server:
        download = _download(site, server, _delta(site))
        download.run()
    assert download.reports == [  # type: ignore[attr-defined]
        (0, size), (SYNC_EVERY, size), (2 * SYNC_EVERY, size), (size, size)]


def test_the_record_names_the_file_and_a_missing_part_starts_over(site: Path) -> None:
    staging = site / "var" / "lib" / "staging"  # made with its parents
    delta = _delta(site)
    with _server(site) as server:
        download = Download(staging, server.url.removesuffix("repo/") + "updates/" + NAME,
                            delta, Limits(retry_delay=0), lambda done, total: None)
        download.run()
        assert (staging / STATE).read_text() == (
            f'{{"file": "{NAME}", "from_commit": "{FROM}", "sha256": "{delta.sha256}", '
            f'"size": {SIZE}, "to_commit": "{TO}"}}\n')
        (staging / NAME).unlink()  # the record stays, its part is gone
        again = Download(staging, download.url, delta, Limits(retry_delay=0),
                         lambda done, total: None)
        assert again.run().read_bytes() == (site / "updates" / NAME).read_bytes()
    assert again.transfer.resumed_from == 0 and again.transfer.received == SIZE


def test_a_part_already_whole_is_verified_without_a_request(site: Path) -> None:
    staging = site / "staging"
    staging.mkdir()
    delta = _delta(site)
    (staging / STATE).write_text(json.dumps(delta.__dict__, sort_keys=True) + "\n")
    (staging / (NAME + ".part")).write_bytes((site / "updates" / NAME).read_bytes())
    download = Download(staging, "http://127.0.0.1:9/never-asked", delta, Limits(retries=0),
                        lambda done, total: None)
    assert download.run() == staging / NAME
    assert download.transfer.requests == 0 and download.transfer.resumed_from == SIZE


def test_an_answer_that_is_neither_whole_nor_partial_is_refused(site: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NoContent(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with ServedInThread(ThreadingHTTPServer(("127.0.0.1", 0), NoContent), "204") as served, \
            pytest.raises(UpdateRefused) as caught:
        url = f"{served.url}/{NAME}"
        Download(site / "staging", url, _delta(site), Limits(retry_delay=0),
                 lambda done, total: None).run()
    assert str(caught.value) == (f"GET {url}: HTTP 204 No Content (hint: the file the signed "
                                 "index names is not served; the next run asks again)")


def test_a_whole_file_left_staged_is_used_once_verified_and_removed_when_not(
        site: Path) -> None:
    """A run held by the apply window leaves the whole file; the next run takes it without
    a request. A whole-sized file with other bytes is not complete: it is removed, so the
    caller does not skip the download window for it, and it is fetched again."""
    delta = _delta(site)
    staging = site / "staging"
    staging.mkdir()
    original = (site / "updates" / NAME).read_bytes()
    (staging / NAME).write_bytes(original)
    with _server(site) as server:
        download = _download(site, server, delta)
        assert download.complete() and download.run() == staging / NAME
        assert download.transfer.requests == 0 and server.stats.body_bytes == 0
    (staging / NAME).write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with _server(site) as server:
        download = _download(site, server, delta)
        assert not download.complete() and not (staging / NAME).exists()
        assert download.run().read_bytes() == original
        assert server.stats.body_bytes == SIZE
