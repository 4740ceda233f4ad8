"""Detectors for personal data: emails, phone numbers, card numbers, IBANs, national ids.

Shapes alone over-match (every 16-digit number, every dotted triple), so each detector
checks what the shape cannot: Luhn for cards, mod-97 and per-country length for IBANs,
the issued ranges for US SSNs and UK NINOs, digit counts and date shapes for phones.
"""

from __future__ import annotations

import re

from .detector import Detector

# Image and document names such as icon@2x.png look like addresses.
_FILE_SUFFIXES = frozenset(
    ["png", "jpg", "jpeg", "gif", "svg", "webp", "bmp", "ico", "pdf", "txt", "md", "js", "ts", "css", "html", "json", "xml", "zip", "gz", "tar", "py"]
)


_URL_USERINFO = re.compile(r"://[^\s/@]{0,64}$")


def _email_ok(m: re.Match[str]) -> bool:
    # user:password@host in a URL is a credential, reported as a connection string.
    if _URL_USERINFO.search(m.string, max(0, m.start() - 70), m.start()):
        return False
    local, _, domain = m.group().rpartition("@")
    if local.startswith(".") or local.endswith(".") or ".." in local:
        return False
    labels = domain.split(".")
    tld = labels[-1]
    if not (tld.isascii() and tld.isalpha() and len(tld) >= 2) or tld.lower() in _FILE_SUFFIXES:
        return False
    return all(label and label[0] != "-" and label[-1] != "-" for label in labels)


EMAIL = Detector(
    "pii.email",
    "email-address",
    re.compile(
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}+@"
        r"[A-Za-z0-9-]{1,63}+(?:\.[A-Za-z0-9-]{1,30}+){1,5}+(?![A-Za-z0-9-])"
    ),
    check=_email_ok,
    context=70,
    needles=("@",),
)

_DIGIT_GROUPS = re.compile(r"[0-9]+")


def _looks_like_date(groups: list[str], text: str) -> bool:
    if " " in text or len(groups) < 3:
        return False
    a, b, c = (int(g) for g in groups[:3])
    day_month = (1 <= a <= 31 and 1 <= b <= 12) or (1 <= a <= 12 and 1 <= b <= 31)
    return day_month and len(groups[2]) in (2, 4) and (len(groups[2]) == 2 or 1900 <= c <= 2100)


def _phone_ok(low: int, high: int):
    def check(m: re.Match[str]) -> bool:
        text = m.group()
        groups = _DIGIT_GROUPS.findall(text)
        # A leading 00 is the international dialling prefix, not part of the number.
        digits = sum(len(g) for g in groups) - (2 if text.startswith("00") else 0)
        if not low <= digits <= high or text.count("(") != text.count(")"):
            return False
        if _looks_like_date(groups, text):
            return False
        # US ZIP+4 (02134-1234) has a leading zero too.
        return not (len(groups) == 2 and [len(g) for g in groups] == [5, 4] and "-" in text)

    return check


PHONE_INTERNATIONAL = Detector(
    "pii.phone",
    "phone-international",
    re.compile(
        r"\+(?<![\w+]\+)[1-9][0-9]{0,2}+(?:[ .-]?(?:\([0-9]{1,5}+\)|[0-9]{1,5}+)){1,6}+(?![\w])"
    ),
    check=_phone_ok(8, 15),
)

PHONE_NANP = Detector(
    "pii.phone",
    "phone-north-america",
    re.compile(
        # The first character is consumed before the lookbehind so the engine can skip
        # ahead to digits and parentheses; the branches then say what it was.
        r"[(1-9](?<![\w.+-][(1-9])"
        r"(?:(?<=1)[ .-]?(?:\([2-9][0-9]{2}\)[ .-]?|[2-9][0-9]{2}[ .-])"
        r"|(?<=\()[2-9][0-9]{2}\)[ .-]?|(?<=[2-9])[0-9]{2}[ .-])"
        r"[2-9][0-9]{2}[ .-][0-9]{4}(?![\w-]|\.[0-9])"
    ),
)

PHONE_NATIONAL = Detector(
    "pii.phone",
    "phone-national",
    re.compile(
        r"[(0](?<![\w.+/-][(0])(?:(?<=\()0[1-9][0-9]{0,3}+\)|(?<=0)0?[1-9][0-9]{0,3}+)"
        r"(?:[ /-][0-9]{2,8}+){1,4}+(?![\w/-]|[.,][0-9])"
    ),
    check=_phone_ok(9, 13),
)


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_ok(m: re.Match[str]) -> bool:
    digits = m.group().replace(" ", "").replace("-", "")
    # Issuer prefixes in use: 2-series Mastercard, Amex/Diners/JCB, Visa, Mastercard, Discover.
    if not re.match(r"2[2-7]|3[0456789]|4|5[1-5]|6", digits):
        return False
    return len(set(digits)) > 1 and luhn_ok(digits)


PAYMENT_CARD = Detector(
    "pii.payment_card",
    "payment-card-number",
    re.compile(
        r"[0-9](?<![0-9]{2})(?:[0-9]{3}(?: [0-9]{4}){3}|[0-9]{3}(?:-[0-9]{4}){3}"
        r"|(?<=3)[0-9]{3}[ -][0-9]{6}[ -][0-9]{4,5}|[0-9]{12,18}+)(?![0-9])"
    ),
    check=_card_ok,
    reveal_tail=4,
)

IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip


def iban_ok(text: str) -> bool:
    iban = text.replace(" ", "")
    if IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


IBAN = Detector(
    "pii.iban",
    "iban",
    re.compile(
        r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z][0-9]{2}(?: ?[A-Z0-9]{4}){2,7}+(?: ?[A-Z0-9]{1,3})?"
        r"(?![A-Za-z0-9])"
    ),
    check=lambda m: iban_ok(m.group()),
    reveal=2,
)

# Numbers the SSA never issues, plus ones printed in ads and textbooks.
_SSN_NEVER = frozenset({"078051120", "219099999", "123456789"})


def _ssn_ok(m: re.Match[str]) -> bool:
    digits = m.group().replace("-", "").replace(" ", "")
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return digits not in _SSN_NEVER


US_SSN = Detector(
    "pii.national_id",
    "us-ssn",
    re.compile(
        r"[0-9](?<![0-9-][0-9])(?:[0-9]{2}-[0-9]{2}-[0-9]{4}|[0-9]{2} [0-9]{2} [0-9]{4})(?![0-9-])"
    ),
    check=_ssn_ok,
)

_NINO_NEVER = frozenset({"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"})


def _nino_ok(m: re.Match[str]) -> bool:
    text = m.group()
    if text[:2] in _NINO_NEVER:
        return False
    return text.count(" ") in (0, 4)


UK_NINO = Detector(
    "pii.national_id",
    "uk-nino",
    re.compile(
        r"[A-CEGHJ-PR-TW-Z](?<![A-Za-z0-9][A-Z])[A-CEGHJ-NPR-TW-Z] ?[0-9]{2} ?[0-9]{2} ?[0-9]{2} ?[A-D]"
        r"(?![A-Za-z0-9])"
    ),
    check=_nino_ok,
)

DETECTORS: tuple[Detector, ...] = (
    EMAIL,
    PHONE_INTERNATIONAL,
    PHONE_NANP,
    PHONE_NATIONAL,
    PAYMENT_CARD,
    IBAN,
    US_SSN,
    UK_NINO,
)
