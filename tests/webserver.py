"""Test-side helpers around the loopback server of :mod:`support.loopback`.

Tests import from here (``from webserver import Resource, serve_sites, fetch``): the
server's names and the helpers that speak to it, in one import.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import subprocess
from typing import TYPE_CHECKING, Any

import urllib3
from support import loopback
from support.loopback import *  # noqa: F403  (re-exported: one import for the tests)
from support.loopback import Site, SiteServer, serve_sites

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path

__all__ = [
    *loopback.__all__,
    "fetch",
    "has_openssl",
    "make_tls_context",
    "serve_fixture",
]


def serve_fixture() -> Iterator[Callable[..., SiteServer]]:
    """Body of the ``serve`` fixture: ``serve(sites, **kw)`` starts a server for the test.

    Register it with ``serve = pytest.fixture(serve_fixture, name="serve")``; every
    server started through it is shut down when the test ends.
    """
    with contextlib.ExitStack() as stack:

        def serve(sites: Mapping[str, Site], **kwargs: Any) -> SiteServer:
            return stack.enter_context(serve_sites(sites, **kwargs))

        yield serve


def fetch(
    server: SiteServer,
    host: str,
    path: str = "/",
    headers: Mapping[str, str] | None = None,
    *,
    method: str = "GET",
    ca_certs: str | None = None,
    timeout: float = 10.0,
    **request_kwargs: Any,
) -> urllib3.BaseHTTPResponse:
    """One request to ``host`` on ``server``, routed the way the crawler's ``resolve:`` does.

    The body is read before the pool closes, so the response can be inspected freely.
    For HTTPS pass ``ca_certs``; the certificate is checked against ``host``. Extra
    keywords go to ``pool.request`` (``decode_content=False``, ``body=...``).
    """
    ip, port = server.resolve[f"{host}:{server.default_port}"].split(":")
    send = {"Host": host, **(headers or {})}
    tls = {"ca_certs": ca_certs, "server_hostname": host, "assert_hostname": host}
    pool_cls = urllib3.HTTPSConnectionPool if server.https else urllib3.HTTPConnectionPool
    pool = pool_cls(ip, int(port), retries=False, timeout=timeout, **(tls if server.https else {}))
    with pool:
        return pool.request(method, path, headers=send, redirect=False, **request_kwargs)


def make_tls_context(folder: Path, hosts: tuple[str, ...]) -> tuple[ssl.SSLContext, str]:
    """A server context with a fresh self-signed certificate for ``hosts``.

    Returns the context and the certificate file, which clients pass as ``ca_certs``.
    Needs the ``openssl`` command; tests should skip when :func:`has_openssl` is False.
    """
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = ",".join(f"DNS:{host}" for host in hosts)
    command = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    subprocess.run(
        [
            *command.split(),
            *("-keyout", str(key), "-out", str(cert), "-days", "2"),
            *("-subj", "/CN=rccrawler loopback", "-addext", f"subjectAltName={names}"),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, str(cert)


def has_openssl() -> bool:
    return shutil.which("openssl") is not None
