"""The built-in detectors, one per entity type, each with a cheap prefilter that is never wrong when it
says no.

``email``           local@domain.tld (ASCII or Latin letters; a TLD of two or more letters)
``phone``           international ``+CC ...`` (8-15 digits) and national numbers written with separators:
                    North American ``(415) 555-0123`` / ``415-555-0123`` / ``415.555.0123``, trunk-prefix
                    ``020 7946 0958``. Bare digit runs, years, prices, dates and times are not phones.
``credit_card``     13-19 digits, optionally grouped by spaces or dashes (4-4-4-4, 4-6-5, ...), first digit
                    2-6 (every major network; Unix timestamps and snowflake ids start with 1), Luhn-checked.
``iban``            country code, check digits and BBAN, spaces allowed, mod-97 checked (upper case only);
                    a registered country's IBAN only at its registered length.
``ip_address``      IPv4 with octets up to 255 (not ``1.2.3`` or ``v1.2.3.4``) and IPv6, compressed forms
                    included; ``::``, ``::1`` and two-digit forms such as the slice ``[1::2]`` are left alone.
``api_key``         ``sk-`` (OpenAI, ``sk-proj-``, Anthropic ``sk-ant-``), ``ak-`` (areal-web keys), GitHub
                    ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_``, Slack ``xox[abposr]-``. An
                    ``sk-``/``ak-`` key needs a digit or capital, so ``sk-learn-compatible-...`` is prose.
``aws_access_key``  access key ids (``AKIA``/``ASIA`` + 16) and secret access keys where labelled
                    (``aws_secret_access_key = ...``, ``"SecretAccessKey": "..."``, or a dict key so named);
                    only the secret value is replaced, the label stays.
``jwt``             three base64url segments (five for JWE) whose header decodes to JSON with ``alg``.
``private_key``     a whole ``-----BEGIN ... PRIVATE KEY-----`` block; a block cut off before its END line is
                    redacted to the end of the text.

Detectors anchored on a literal (``@``, ``sk-``, ``eyJ``, ``PRIVATE KEY``) start with ``str.find`` or
``in``, so clean prose costs a handful of substring searches; ``bench/sanitizer.py`` measures it.

Hostile input: every built-in detector runs in time linear in the text, whatever the text (no pattern can
backtrack over a long run once per position, a rejected candidate is never rescanned from far behind, a
number freed by the redaction of its neighbour is found in the same pass, so that chains of findings do not
cost one pass each); ``tests/workers/pii/test_sanitizer_limits.py`` feeds each detector 1 MiB built to
defeat it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from workers.pii.addresses import IPV4, find_emails, find_ipv6, ipv4_span, may_hold_ipv4, may_hold_ipv6
from workers.pii.banking import IBAN, find_credit_cards, iban_span, may_hold_card, may_hold_iban
from workers.pii.base import CUSTOM_PREFIX, SPECIFICITY, Span
from workers.pii.credentials import JWT, find_api_keys, find_aws_keys, find_private_keys, jwt_span
from workers.pii.phones import find_phones, may_hold_phone
from workers.pii.text import TextView, Validator, checked_matches, in_numeric_clusters, rechecked_matches


@dataclass(frozen=True)
class Detector:
    entity: str
    might_occur: Callable[[TextView], bool]  # cheap, and never wrong when it says no
    find_spans: Callable[[TextView], Iterator[Span]]

    @property
    def rank(self) -> int:
        return -1 if self.entity.startswith(CUSTOM_PREFIX) else SPECIFICITY.index(self.entity)


def always(view: TextView) -> bool:
    return True


def _containing(marker: str) -> Callable[[TextView], bool]:
    return lambda view: marker in view.text


def _searching(pattern: re.Pattern[str], validate: Validator) -> Callable[[TextView], Iterator[Span]]:
    return lambda view: rechecked_matches(pattern, view.text, validate)


BUILTIN_DETECTORS = (
    Detector("private_key", _containing("PRIVATE KEY"), find_private_keys),
    Detector("jwt", _containing("eyJ"), lambda view: checked_matches(JWT, view.text, jwt_span)),
    Detector("api_key", always, find_api_keys),
    Detector("aws_access_key", always, find_aws_keys),
    Detector("iban", may_hold_iban, _searching(IBAN, iban_span)),
    Detector("credit_card", may_hold_card, find_credit_cards),
    Detector("email", _containing("@"), find_emails),
    Detector("ip_address", may_hold_ipv4, in_numeric_clusters(IPV4, ipv4_span, shortest=7)),
    Detector("ip_address", may_hold_ipv6, find_ipv6),
    Detector("phone", may_hold_phone, find_phones),
)
