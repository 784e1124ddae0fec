"""HTTP for the client: one `httpx.Client`, the bearer key, errors, and `Link` pagination.

`Transport` sends every request, turns an error status into `ApiError` (the body's
`code`, `message` and other fields) and a failed exchange into `TransportError`, and
follows list routes' `Link: <…>; rel="next"` headers page by page.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from importlib import metadata
from typing import Any
from urllib.parse import quote

import httpx

from privq_client.errors import ApiError, TransportError

Json = dict[str, Any]
Params = Mapping[str, Any]

# Attempts for a connection that could not be opened (nothing was sent, so it is safe for
# every method); httpx retries only connect errors with this.
CONNECT_RETRIES = 2
DEFAULT_TIMEOUT_SECONDS = 60.0
ERROR_TEXT_LIMIT = 300


class ClientTimeout:
    """Marker: use the timeout the client was made with."""


CLIENT_TIMEOUT = ClientTimeout()
# A request's own timeout: seconds, None for none at all, or the client's.
Timeout = float | None | httpx.Timeout | ClientTimeout


def _version() -> str:
    try:
        return metadata.version("privq")
    except metadata.PackageNotFoundError:
        return "unknown"


USER_AGENT = f"privq-client/{_version()}"


def segment(value: str) -> str:
    """One path segment (an id), percent-encoded: nothing in it can change the path."""
    return quote(str(value), safe="")


def clean_params(params: Params | None) -> dict[str, Any]:
    """Query parameters without the ones left at None (the service's defaults apply)."""
    return {key: value for key, value in (params or {}).items() if value is not None}


def api_error(response: httpx.Response, method: str, url: str) -> ApiError:
    """The `ApiError` of an error response (its body read), JSON or not."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or f"http_{status}")
        message = str(error.get("message") or "")
        details = {k: v for k, v in error.items() if k not in ("code", "message")}
        return ApiError(status, code, message, details=details, method=method, url=url)
    # Not the service's error body (e.g. a proxy's page): keep a little of it.
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    text = response.text.strip()[:ERROR_TEXT_LIMIT]
    return ApiError(status, f"http_{status}", text or phrase, method=method, url=url)


class Transport:
    """Sends requests to one privq service with one key; raises the client's errors."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
        http_client: httpx.Client | None = None,
        verify: bool | ssl.SSLContext = True,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not api_key:
            raise ValueError("api_key is empty")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT}
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            timeout=timeout,
            verify=verify,
            transport=httpx.HTTPTransport(retries=CONNECT_RETRIES, verify=verify),
        )

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def url(self, path: str) -> str:
        """An absolute URL: a path is under `base_url` (a path prefix kept); a whole URL
        only on the service's own origin (the key is never sent anywhere else)."""
        if path.startswith(("http://", "https://")):
            given, service = httpx.URL(path), httpx.URL(self.base_url)
            if (given.scheme, given.netloc) != (service.scheme, service.netloc):
                raise ValueError(f"{path} is not on the service at {self.base_url}")
            return path
        return self.base_url + ("" if path.startswith("/") else "/") + path

    def _build(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        files: Any = None,
        data: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = CLIENT_TIMEOUT,
    ) -> httpx.Request:
        return self._http.build_request(
            method,
            self.url(path),
            params=clean_params(params) or None,
            json=json,
            files=files,
            data=data,
            headers={**self._headers, **(headers or {})},
            timeout=httpx.USE_CLIENT_DEFAULT if isinstance(timeout, ClientTimeout) else timeout,
        )

    def _send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        method, url = request.method, str(request.url)
        try:
            return self._http.send(request, stream=stream)
        except httpx.TimeoutException as error:
            raise TransportError(
                f"timed out ({type(error).__name__})", method=method, url=url
            ) from error
        except httpx.RequestError as error:
            raise TransportError(
                f"could not reach the service at {self.base_url}: {error}", method=method, url=url
            ) from error

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        files: Any = None,
        data: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: Timeout = CLIENT_TIMEOUT,
    ) -> httpx.Response:
        """Send one request; the response if its status is below 400, else `ApiError`."""
        request = self._build(
            method,
            path,
            params=params,
            json=json,
            files=files,
            data=data,
            headers=headers,
            timeout=timeout,
        )
        response = self._send(request)
        if response.status_code >= 400:
            raise api_error(response, method, str(request.url))
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        """The decoded JSON body of a successful request."""
        response = self.request(method, path, **kwargs)
        return decode_json(response, method)

    def paginate(
        self, path: str, params: Params | None = None, *, page_size: int | None = None
    ) -> Iterator[Json]:
        """Every item of a list route, page after page, following `Link: rel="next"`."""
        query = {**clean_params(params), **({"limit": page_size} if page_size else {})}
        next_path: str | None = path
        seen: set[str] = set()
        while next_path is not None:
            response = self.request("GET", next_path, params=query)
            page = decode_json(response, "GET")
            if not isinstance(page, list):
                raise ApiError(
                    response.status_code,
                    "invalid_response",
                    "a list route answered something other than a JSON array",
                    method="GET",
                    url=str(response.url),
                )
            yield from page
            link = response.links.get("next", {}).get("url")
            if link and link.startswith(("http://", "https://")):
                try:
                    self.url(link)
                except ValueError as error:
                    raise ApiError(
                        response.status_code,
                        "invalid_response",
                        f"the next-page link leaves the service: {error}",
                        method="GET",
                        url=str(response.url),
                    ) from None
            # The link carries the page's whole query (filters, limit, cursor).
            next_path, query = (link, {}) if link else (None, {})
            if next_path is not None:
                if next_path in seen:  # a server bug must not loop forever
                    raise ApiError(
                        response.status_code,
                        "invalid_response",
                        f"the next-page link repeats an earlier page: {next_path}",
                        method="GET",
                        url=str(response.url),
                    )
                seen.add(next_path)

    @contextmanager
    def stream(
        self, method: str, path: str, *, params: Params | None = None
    ) -> Iterator[httpx.Response]:
        """A streamed response (status below 400, else `ApiError`); closed on exit."""
        request = self._build(method, path, params=params)
        url = str(request.url)
        response = self._send(request, stream=True)
        try:
            if response.status_code >= 400:
                response.read()
                raise api_error(response, method, url)
            try:
                yield response
            except httpx.TimeoutException as error:
                raise TransportError(
                    f"timed out while reading ({type(error).__name__})", method=method, url=url
                ) from error
            except httpx.RequestError as error:
                raise TransportError(
                    f"the response broke off: {error}", method=method, url=url
                ) from error
        finally:
            response.close()


def decode_json(response: httpx.Response, method: str) -> Any:
    """The body as JSON, or `ApiError` (code `invalid_response`) if it is not JSON."""
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise ApiError(
            response.status_code,
            "invalid_response",
            "the service answered with something other than JSON: "
            + response.text.strip()[:ERROR_TEXT_LIMIT],
            method=method,
            url=str(response.url),
        ) from None
