"""The one status → error type table behind the REST API's and the gateway's error bodies."""

import pytest

from apps.core.error_types import anthropic_error_type, error_type


@pytest.mark.parametrize(
    ("status", "openai", "anthropic"),
    [
        (400, "invalid_request_error", "invalid_request_error"),
        (401, "authentication_error", "authentication_error"),
        (403, "permission_error", "permission_error"),
        (404, "not_found_error", "not_found_error"),
        (405, "invalid_request_error", "invalid_request_error"),
        (409, "conflict_error", "invalid_request_error"),
        (413, "invalid_request_error", "request_too_large"),
        (429, "rate_limit_error", "rate_limit_error"),
        (503, "api_error", "overloaded_error"),
        # not in the table: each vocabulary's default
        (406, "api_error", "invalid_request_error"),
        (501, "api_error", "api_error"),
    ],
)
def test_each_status_has_one_type_per_vocabulary(status, openai, anthropic):
    assert error_type(status) == openai
    assert anthropic_error_type(status) == anthropic
