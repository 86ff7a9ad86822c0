import base64
import copy
import json
import random
import time

import pytest

from workers.pii import (
    CustomPattern,
    Sanitizer,
    SanitizeResult,
    sanitizer_for,
)

SANITIZER = Sanitizer()


def _segment(part: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(part).encode()).decode().rstrip("=")


JWT = f"{_segment({'alg': 'HS256', 'typ': 'JWT'})}.{_segment({'sub': '42'})}.c2lnbmF0dXJlLWJ5dGVz"
JWT_WITHOUT_ALG = f"{_segment({'typ': 'JWT'})}.{_segment({'sub': '42'})}.c2lnbmF0dXJl"
AREAL_KEY = "ak-" + "Qm9_x-Tz3kLp8WvN2rYc5HdJ7sFa1BgE6uKi4oXq0Zw"  # 46 characters, like apps.tenants.keys
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\nq2xF8Zw==\n-----END RSA PRIVATE KEY-----"

POSITIVES = [
    ("write to jane.doe+billing@example.co.uk today", "jane.doe+billing@example.co.uk", "email"),
    ("call (415) 555-0123 please", "(415) 555-0123", "phone"),
    ("call 415-555-0123.", "415-555-0123", "phone"),
    ("call 415.555.0123", "415.555.0123", "phone"),
    ("toll free 1-800-555-0123", "1-800-555-0123", "phone"),
    ("London +44 20 7946 0958", "+44 20 7946 0958", "phone"),
    ("US +1 (415) 555-0123", "+1 (415) 555-0123", "phone"),
    ("E.164 +14155550123", "+14155550123", "phone"),
    ("UK 020 7946 0958", "020 7946 0958", "phone"),
    ("Paris 01 23 45 67 89", "01 23 45 67 89", "phone"),
    ("card 4111 1111 1111 1111 exp 12/28", "4111 1111 1111 1111", "credit_card"),
    ("card 4111-1111-1111-1111", "4111-1111-1111-1111", "credit_card"),
    ("card 5500000000000004", "5500000000000004", "credit_card"),
    ("amex 3782 822463 10005", "3782 822463 10005", "credit_card"),
    ("pay to DE89 3704 0044 0532 0130 00 now", "DE89 3704 0044 0532 0130 00", "iban"),
    ("pay to GB82WEST12345698765432", "GB82WEST12345698765432", "iban"),
    ("pay to NO93 8601 1117 947", "NO93 8601 1117 947", "iban"),
    ("host 192.168.1.10 is down", "192.168.1.10", "ip_address"),
    ("host 255.255.255.0", "255.255.255.0", "ip_address"),
    ("host 2001:0db8:85a3:0000:0000:8a2e:0370:7334", "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "ip_address"),
    ("host 2001:db8::8a2e:370:7334 up", "2001:db8::8a2e:370:7334", "ip_address"),
    ("link-local fe80::1", "fe80::1", "ip_address"),
    ("mapped ::ffff:192.0.2.1", "::ffff:192.0.2.1", "ip_address"),
    ("OPENAI_API_KEY=sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4", None, "api_key"),
    ("key sk-proj-Abc123def456GHI789jkl012MNO345_pq-r678", None, "api_key"),
    ("key sk-ant-api03-abcDEF123456789012345678901234-xyzXYZ", None, "api_key"),
    ("token ghp_" + "a1B2c3D4e5F6" * 3, None, "api_key"),
    ("token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH", None, "api_key"),
    ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", None, "api_key"),
    (f"Authorization: Bearer {AREAL_KEY}", AREAL_KEY, "api_key"),
    ("id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("id ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A", "aws_access_key"),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_access_key"),
    (f'{{"SecretAccessKey": "{AWS_SECRET}"}}', AWS_SECRET, "aws_access_key"),
    (f"Authorization: Bearer {JWT}", JWT, "jwt"),
    (f"key:\n{PRIVATE_KEY}\nthanks", PRIVATE_KEY, "private_key"),
]


@pytest.mark.parametrize(("text", "secret", "entity"), POSITIVES)
def test_detector_redacts_its_entity(text, secret, entity):
    result = SANITIZER.scan_text(text)

    assert result.entities == (entity,)
    assert f"[REDACTED:{entity}]" in result.text
    if secret is not None:
        assert secret not in result.text
        assert result.text == text.replace(secret, f"[REDACTED:{entity}]")


def test_labelled_aws_secret_keeps_its_label():
    result = SANITIZER.scan_text(f"export AWS_SECRET_ACCESS_KEY='{AWS_SECRET}'")

    assert result.text == "export AWS_SECRET_ACCESS_KEY='[REDACTED:aws_access_key]'"


def test_private_key_cut_off_before_its_end_line_is_redacted_to_the_end():
    result = SANITIZER.scan_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA")

    assert result == SanitizeResult("[REDACTED:private_key]", ("private_key",))


NOT_PII = [
    '{"a": 12, "b": 30}',
    "[15496, 11, 995, 13, 2026]",
    "released 2026-11-22 at 2026-11-22T10:30:00+01:00",
    "dated 22.11.2026 and 05-11-2026",
    "version v1.2.3, also 1.2.3 and build 1.2.3.4.5",
    "it costs $1,234.56 or 1 234,50 EUR, tax 19.5%",
    "order ORD-12345 and invoice INV-2026-000123",
    "the year 2026, 42 items, 3.14159",
    "unix time 1732252800 or 1732252800123 in milliseconds",
    "snowflake 1187523467098312704",
    "the time is 10:30:45",
    "hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "C++ std::vector<int> and Rust Vec::<u8>::new()",
    "python slices x[::2], x[1::2] and the loopback ::1",
    "pip install sk-learn-compatible-estimators-for-everyone",
    "a task-Abc123def456GHI789jkl012 and mask-Zx9Zx9Zx9Zx9Zx9Zx9Zx9",
    "reach the team @platform or user@localhost",
    "Grüße aus München — 東京タワー 🚀 naïve café",
    "ASIAN MARKETS and AKIA are words",
]


@pytest.mark.parametrize("text", NOT_PII)
def test_ordinary_text_is_not_flagged(text):
    assert SANITIZER.scan_text(text) == SanitizeResult(text, ())


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # fails Luhn
        "card 4111111111111112",
        "card 0000 0000 0000 0000",  # passes Luhn, but no card number starts with 0
        "iban DE89 3704 0044 0532 0130 01",  # wrong check digits
        "iban GB82WEST12345698765433",
        "iban XX46370400440532013000",  # passes mod 97, but XX is no registered country
        "iban DE863704004405320130",  # passes mod 97, but German IBANs have 22 characters, not 20
        "ip 256.1.1.1 and 192.168.1",
        "ip v10.0.0.1",
        f"token {JWT_WITHOUT_ALG}",
        "key AKIAIOSFODNN7EXAMPL",  # 15 characters after the prefix
        "aws_secret_access_key = tooShort123",
        "phone 555-0123 or 4155550123 or +1 2",
        "key sk-short1",
    ],
)
def test_near_misses_are_not_flagged(text):
    assert SANITIZER.scan_text(text) == SanitizeResult(text, ())


def test_several_entities_in_one_text_are_all_redacted_and_listed_sorted():
    text = "Mail a@b.com, call +44 20 7946 0958, card 4111 1111 1111 1111, host 10.0.0.1."

    result = SANITIZER.scan_text(text)

    assert result.text == (
        "Mail [REDACTED:email], call [REDACTED:phone], card [REDACTED:credit_card], "
        "host [REDACTED:ip_address]."
    )
    assert result.entities == ("credit_card", "email", "ip_address", "phone")


def test_iban_ends_at_its_country_length_even_when_a_longer_reading_passes_mod97():
    # "DE89370400440532013000" + "GI" also satisfies mod 97, but German IBANs are 22 characters
    result = SANITIZER.scan_text("IBAN DE89 3704 0044 0532 0130 00 GI")

    assert result == SanitizeResult("IBAN [REDACTED:iban] GI", ("iban",))


def test_card_followed_by_a_security_code_is_still_found():
    result = SANITIZER.scan_text("4111 1111 1111 1111 123")

    assert result.text == "[REDACTED:credit_card] 123"


def test_overlapping_findings_are_redacted_once_as_the_more_specific_type():
    # the IBAN's digits also read as a trunk-prefix phone number ("0044 0532 0130 00")
    result = SANITIZER.scan_text("IBAN DE89 3704 0044 0532 0130 00")

    assert result == SanitizeResult("IBAN [REDACTED:iban]", ("iban",))


def test_a_partial_overlap_is_redacted_as_one_union_span():
    sanitizer = Sanitizer([CustomPattern("site", r"example\.com/[a-z]+")])

    result = sanitizer.scan_text("to jane.doe@example.com/inbox now")

    assert result == SanitizeResult("to [REDACTED:custom:site] now", ("custom:site",))


def test_custom_pattern_redacts_with_its_name():
    sanitizer = Sanitizer([CustomPattern("employee_id", r"EMP-[0-9]{6}")])

    result = sanitizer.scan_text("ask EMP-123456 or EMP-654321, not EMP-12")

    placeholder = "[REDACTED:custom:employee_id]"
    assert result.text == f"ask {placeholder} or {placeholder}, not EMP-12"
    assert result.entities == ("custom:employee_id",)


def test_sanitizer_for_compiles_each_pattern_set_once():
    patterns = [CustomPattern("ticket", r"TCK-[0-9]{5}")]

    first = sanitizer_for(patterns)

    assert sanitizer_for(tuple(patterns)) is first
    assert sanitizer_for([CustomPattern("ticket", r"TCK-[0-9]{5}")]) is first
    assert sanitizer_for([CustomPattern("ticket", r"TCK-[0-9]{6}")]) is not first
    assert sanitizer_for(()) is not first
    assert first.scan_text("see TCK-12345").entities == ("custom:ticket",)


IDEMPOTENCE_CORPUS = [text for text, _, _ in POSITIVES] + [
    "Mail a@b.com, call +44 20 7946 0958 or (415) 555-0123, IBAN DE89 3704 0044 0532 0130 00, "
    f"card 4111-1111-1111-1111, {AREAL_KEY}, {JWT}, 2001:db8::1 and 10.0.0.1",
]


@pytest.mark.parametrize("text", IDEMPOTENCE_CORPUS)
def test_scanning_redacted_text_finds_nothing_new(text):
    sanitizer = Sanitizer([CustomPattern("word", r"[A-Za-z_]+:[a-z_]+")])  # would match "REDACTED:email"
    once = sanitizer.scan_text(text)

    twice = sanitizer.scan_text(once.text)

    assert once.entities
    assert twice == SanitizeResult(once.text, ())


def test_a_finding_glued_to_another_is_redacted_too():
    result = SANITIZER.scan_text("a@b.coma@b.com+44 20 7946 0958")

    assert result == SanitizeResult("[REDACTED:email][REDACTED:phone]", ("email", "phone"))


FRAGMENTS = [
    "4111 1111 1111 1111",
    "a@b.com",
    "+44 20 7946 0958",
    "(415) 555-0123",
    "DE89 3704 0044 0532 0130 00",
    "10.0.0.1",
    "fe80::1",
    "::",
    ":",
    "1",
    "0",
    " ",
    "-",
    ".",
    "@",
    "+",
    "(",
    ")",
    "AKIA",
    "IOSFODNN7EXAMPLE",
    "sk-",
    "ak-",
    "A1b2C3d4E5f6G7h8I9j0K1",
    "xoxb-",
    "eyJ",
    JWT,
    "ab",
    "Ü",
    "東",
    "\n",
    "[REDACTED:",
    "]",
    "2026",
    "DE",
    "89",
    "255",
    "-----BEGIN EC PRIVATE KEY-----",
    "-----END EC PRIVATE KEY-----",
]


def test_scanning_redacted_text_finds_nothing_new_on_random_mixtures():
    generator = random.Random(20261122)
    sanitizer = Sanitizer([CustomPattern("word", r"[A-Za-z_]+:[a-z_]+")])
    found_something = 0
    for _ in range(400):
        text = "".join(generator.choice(FRAGMENTS) for _ in range(generator.randint(1, 12)))
        once = sanitizer.scan_text(text)

        assert sanitizer.scan_text(once.text) == SanitizeResult(once.text, ()), text
        found_something += bool(once.entities)
    assert found_something > 200


def test_scanning_redacted_messages_finds_nothing_new():
    once, entities = SANITIZER.scan_messages(_openai_messages())

    assert entities
    assert SANITIZER.scan_messages(once) == (once, ())


def test_unicode_around_findings_is_kept():
    text = "Grüße, schreib an jürgen@müller.de — oder ruf +49 30 12345678 an. 東京 🚀"

    result = SANITIZER.scan_text(text)

    assert result.text == "Grüße, schreib an [REDACTED:email] — oder ruf [REDACTED:phone] an. 東京 🚀"
    assert result.entities == ("email", "phone")


def test_email_next_to_unicode_punctuation_or_cjk_prose_is_redacted_alone():
    assert SANITIZER.scan_text("Kontakt: «anna@example.de»").text == "Kontakt: «[REDACTED:email]»"
    assert SANITIZER.scan_text("请联系test@example.com谢谢").text == "请联系[REDACTED:email]谢谢"


def _openai_messages() -> list[dict]:
    arguments = {"to": "john@example.com", "count": 12, "note": "card\n4111111111111111", "tags": ["x"]}
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "I am jane@example.com"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo@AAAA.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_4155550123",
                    "type": "function",
                    "function": {"name": "send_mail", "arguments": json.dumps(arguments)},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_4155550123",
            "content": json.dumps({"sent_to": "john@example.com"}),
        },
        {"role": "assistant", "content": "Done, mailed the account +44 20 7946 0958."},
    ]


def test_openai_messages_are_redacted_in_a_deep_copy():
    messages = _openai_messages()
    original = copy.deepcopy(messages)

    redacted, entities = SANITIZER.scan_messages(messages)

    assert messages == original
    assert entities == ("credit_card", "email", "phone")
    assert redacted[0] == original[0]
    assert redacted[1]["content"][0] == {"type": "text", "text": "I am [REDACTED:email]"}
    assert redacted[1]["content"][1] == original[1]["content"][1]
    assert redacted[4]["content"] == "Done, mailed the account [REDACTED:phone]."
    redacted[1]["content"][1]["image_url"]["url"] = "changed"
    assert messages[1]["content"][1]["image_url"]["url"] != "changed"


def test_tool_call_arguments_stay_valid_json_after_redaction():
    redacted, _ = SANITIZER.scan_messages(_openai_messages())

    tool_call = redacted[2]["tool_calls"][0]
    arguments = json.loads(tool_call["function"]["arguments"])
    assert arguments == {
        "to": "[REDACTED:email]",
        "count": 12,
        "note": "card\n[REDACTED:credit_card]",
        "tags": ["x"],
    }
    assert tool_call["id"] == "call_4155550123"
    assert tool_call["function"]["name"] == "send_mail"
    assert json.loads(redacted[3]["content"]) == {"sent_to": "[REDACTED:email]"}
    assert redacted[3]["tool_call_id"] == "call_4155550123"


def test_clean_tool_arguments_are_kept_byte_for_byte():
    arguments = '{"a":12,  "b": 30}'
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": arguments}}
            ],
        }
    ]

    redacted, entities = SANITIZER.scan_messages(messages)

    assert redacted[0]["tool_calls"][0]["function"]["arguments"] == arguments
    assert entities == ()


def test_broken_tool_arguments_are_scanned_as_text():
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"to": "a@b.com", '}}
            ],
        }
    ]

    redacted, entities = SANITIZER.scan_messages(messages)

    assert redacted[0]["tool_calls"][0]["function"]["arguments"] == '{"to": "[REDACTED:email]", '
    assert entities == ("email",)


def test_anthropic_blocks_are_redacted():
    messages = [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "the user's IP is 203.0.113.7",
                    "signature": "EqQBCkYIARgCIkA@x.io",
                },
                {"type": "text", "text": "Sending now."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "send",
                    "input": {"to": "bob@example.org", "aws_secret_access_key": AWS_SECRET, "retries": 3},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01A",
                    "content": "delivered to bob@example.org",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01B",
                    "content": [{"type": "text", "text": "card on file 5500 0000 0000 0004"}],
                },
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "x@example.com"},
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "ring 415-555-0123"},
                },
            ],
        },
    ]

    redacted, entities = SANITIZER.scan_messages(messages)

    thinking, text, tool_use = redacted[0]["content"]
    assert thinking == {
        "type": "thinking",
        "thinking": "the user's IP is [REDACTED:ip_address]",
        "signature": "EqQBCkYIARgCIkA@x.io",
    }
    assert text == {"type": "text", "text": "Sending now."}
    assert tool_use["input"] == {
        "to": "[REDACTED:email]",
        "aws_secret_access_key": "[REDACTED:aws_access_key]",
        "retries": 3,
    }
    result_text, result_blocks, image, document = redacted[1]["content"]
    assert result_text["content"] == "delivered to [REDACTED:email]"
    assert result_blocks["content"][0]["text"] == "card on file [REDACTED:credit_card]"
    assert image == messages[1]["content"][2]
    assert document["source"]["data"] == "ring [REDACTED:phone]"
    assert entities == ("aws_access_key", "credit_card", "email", "ip_address", "phone")


def test_scan_value_walks_any_json_like_value():
    value = {
        "user": {"emails": ["a@b.com", "plain"], "age": 41, "active": True, "score": 0.5, "note": None},
        "card": 4111111111111111,
        "c@d.org": "key holder",
        "ids": (1, 2),
    }

    redacted, entities = SANITIZER.scan_value(value)

    assert redacted == {
        "user": {
            "emails": ["[REDACTED:email]", "plain"],
            "age": 41,
            "active": True,
            "score": 0.5,
            "note": None,
        },
        "card": "[REDACTED:credit_card]",
        "[REDACTED:email]": "key holder",
        "ids": [1, 2],
    }
    assert entities == ("credit_card", "email")
    assert value["user"]["emails"][0] == "a@b.com"


def test_scan_value_of_a_plain_string_and_of_clean_values():
    assert SANITIZER.scan_value("mail a@b.com") == ("mail [REDACTED:email]", ("email",))
    assert SANITIZER.scan_value({"a": 12, "b": [30, "x"]}) == ({"a": 12, "b": [30, "x"]}, ())


@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000 + "@",  # a long local part: a naive email regex is quadratic here
        "1 " * 100_000,  # one long numeric cluster
        "ab:" * 100_000,  # colons everywhere
        "DE00 " * 40_000,  # IBAN-shaped groups that never validate
        "4111 " * 20_000,  # card-shaped groups that never pass Luhn
        "sk-" * 50_000,  # one key-shaped token with nested prefixes
        "eyJhb." * 40_000,
    ],
)
def test_adversarial_input_takes_linear_time(text):
    started = time.perf_counter()

    SANITIZER.scan_text(text)

    assert time.perf_counter() - started < 3.0
