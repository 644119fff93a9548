"""Every error code the HTTP API answers, with its status and what it means: the one table that
:class:`tokendp.service.errors.APIError`, the body-size middleware
(:class:`tokendp.service.limits.BodyLimit`) and the OpenAPI document's responses
(:mod:`tokendp.service.contract`) read, so a code has one status everywhere.

An error body is ``{"error": {"code", "message", ...}}``; messages never carry document text.
"""

from __future__ import annotations

# code -> (HTTP status, what it means). The order is the order the OpenAPI document lists them in.
CODES: dict[str, tuple[int, str]] = {
    "ambiguous_length": (400, "both Content-Length and Transfer-Encoding were sent (RFC 9112, 6.1); the connection "
                              "closes"),
    "malformed_body": (400, "the body could not be read as text (not UTF-8)"),
    "invalid_parameter": (400, "a parameter was refused by a rule the schema cannot state (across fields, against "
                               "the model, the tenant or this server's limits); the message names the rule"),
    "invalid_input": (400, "the input was refused by a rule the schema cannot state (a span outside its text, a "
                           "document longer than the model's context); the message names the rule, never the text"),
    "unauthorized": (401, "no key, or a key that matches none (send Authorization: Bearer KEY)"),
    "forbidden": (403, "a reader key on an owner's route, or a reader fixing /v1/ask's seed"),
    "budget_exceeded": (403, "a unit would pass its budget; nothing was charged or generated (the body names the "
                             "unit)"),
    "not_found": (404, "no such document (or reader key) in this tenant; a draft reads the same"),
    "no_match": (404, "no confirmed document's public version shares a word with the question"),
    "method_not_allowed": (405, "the path does not take this method; Allow lists the ones it takes"),
    "document_exists": (409, "the vault holds a document with this id (PUT replaces it)"),
    "body_too_large": (413, "more body bytes than this server's --max-body-bytes, whatever the framing; the "
                            "connection closes"),
    "text_too_long": (413, "a text for the server's tagger above --max-tag-chars characters"),
    "invalid_request": (422, "the body or a parameter does not match the schema; the fields and rules are listed, "
                             "never the values"),
    "quota_exceeded": (429, "the reader key's own releases or tokens per day are used up"),
    "rate_limited": (429, "more requests in a minute than --rate-limit, for the tenant's owner keys or this "
                          "reader key (Retry-After)"),
    "auth_rate_limited": (429, "more failed authentications from this address in a minute than "
                               "--max-auth-failures (Retry-After)"),
    "client_closed_request": (499, "the client went away (only the log sees it)"),
    "accounting_mismatch": (500, "the output was withheld: its certificate differs from the reservation"),
    "internal_error": (500, "an internal error (the log has its type); the body says whether anything was charged"),
    "model_unavailable": (503, "the server's model failed to load (/healthz says error)"),
    "shutting_down": (503, "the server stopped the request as it shut down; retry when it is back"),
    "ticket_lapsed": (503, "this server missed its lease on the release's place in line; nothing was charged; ask "
                           "again (Retry-After)"),
}


def status(code: str) -> int:
    """The HTTP status of ``code`` (KeyError for a code the table does not hold)."""
    return CODES[code][0]
