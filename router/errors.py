"""The router's errors and their one OpenAI-style rendering.

Handlers raise a RouterError; `to_response` is the only place that turns one into JSON
(`{"error": {"message", "type", "code"}}`) with its status and headers.
"""

from __future__ import annotations

import logging

from aiohttp import web

from kvpin import logs

log = logging.getLogger(logs.ROUTER)


class RouterError(Exception):
    """A request the router refuses or cannot serve."""

    status = 500
    type = "server_error"
    code: str | None = None
    close = False  # the body was not read whole: close the connection rather than drain it

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class BadRequestError(RouterError):
    status, type, code = 400, "invalid_request_error", "invalid_request"


class UnauthorizedError(RouterError):
    status, type, code = 401, "authentication_error", "invalid_api_key"


class NotFoundError(RouterError):
    status, type, code = 404, "invalid_request_error", "not_found"


class MethodNotAllowedError(RouterError):
    status, type, code = 405, "invalid_request_error", "method_not_allowed"


class RequestTimeoutError(RouterError):
    status, type, code = 408, "invalid_request_error", "request_timeout"
    close = True


class ExpectationFailedError(RouterError):
    status, type, code = 417, "invalid_request_error", "expectation_failed"
    close = True


class UnknownEndpointError(RouterError):
    status, type, code = 404, "invalid_request_error", "model_not_found"


class BodyTooLargeError(RouterError):
    status, type, code = 413, "invalid_request_error", "request_too_large"
    close = True


class NoMemberError(RouterError):
    """No Ready member, or every member failed or is ejected."""

    status, type, code = 503, "server_error", "no_ready_members"


class UpstreamError(RouterError):
    """The members tried all failed before answering."""

    status, type, code = 502, "server_error", "upstream_unavailable"


class UpstreamTimeoutError(UpstreamError):
    status, code = 504, "upstream_timeout"


def to_response(err: RouterError) -> web.Response:
    """The OpenAI-style JSON error response."""
    headers = {}
    if err.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(err.retry_after)))
    response = web.json_response(
        {"error": {"message": err.message, "type": err.type, "code": err.code}},
        status=err.status,
        headers=headers,
    )
    if err.close:
        response.force_close()
    return response


def render(err: Exception) -> web.Response:
    """Any exception a handler raised, as JSON: a RouterError as itself, a bug as a 500."""
    if isinstance(err, RouterError):
        return to_response(err)
    log.exception("unexpected error", exc_info=err)
    return to_response(RouterError("the router failed to handle the request"))
