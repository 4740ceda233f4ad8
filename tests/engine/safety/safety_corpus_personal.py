"""Labelled examples for personal data, content word lists and a user block list.

Near-misses are deliberate: numbers that fail Luhn, IBANs with a wrong checksum, dates,
versions and ZIP codes that are not phone numbers, SSNs from never-issued ranges."""

from __future__ import annotations

from safety_samples import RNG, group, luhn_complete, wrap


def positives() -> dict[str, list[tuple[str, str]]]:
    p: dict[str, list[tuple[str, str]]] = {}
    emails = [
        "alice.smith@gmail.com", "bob+tag@company.co.uk", "first_last@sub.domain.org",
        "x@y.io", "John.Doe@Outlook.COM", "user123@mail.ru", "o'brien@irish.ie",
        "support@acme-widgets.de", "a.b.c@d.e.f.museum", "me@my.name",
    ]
    email_templates = [
        "{v}", "Contact: {v}", "<{v}>", "mailto:{v}", '{{"email": "{v}"}}',
        "write to {v}.", "cc {v}, thanks", "(email {v})", "From: Jane <{v}>", "{v}\n",
    ]
    p["pii.email"] = wrap(emails * 2, email_templates)
    phones = [
        "+1 415 555 2671", "+44 20 7946 0958", "+49 30 12345678", "+33 1 23 45 67 89",
        "+14155552671", "+1 (415) 555-2671", "+91 98765 43210", "+81 3-1234-5678",
        "+61 2 9876 5432", "(415) 555-2671", "415-555-2671", "415.555.2671",
        "1-800-555-0199", "020 7946 0958", "07700 900123", "030 12345678",
        "01 23 45 67 89", "0171/1234567", "0044 20 7946 0958", "(020) 7946 0958",
        "+353 1 234 5678", "+34 612 345 678",
    ]
    phone_templates = ["call {v}", "Tel: {v}", "{v}", "phone {v}.", "({v})", "at {v}, ask"]
    p["pii.phone"] = wrap(phones, phone_templates)
    cards = []
    brands = [("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("6011", 16), ("35", 16), ("4", 13)]
    for i in range(14):
        prefix, n = brands[i % len(brands)]
        number = luhn_complete(prefix, n)
        if n == 16:
            number = [number, group(number, [4] * 4, " "), group(number, [4] * 4, "-")][i % 3]
        cards.append(number)
    for i in range(4):
        amex = luhn_complete(RNG.choice(["34", "37"]), 15)
        cards.append(group(amex, [4, 6, 5], " " if i % 2 else "-"))
    cards += [luhn_complete("36", 14), luhn_complete("4", 19)]
    card_templates = ["card {v}", "{v}", "Card number: {v}, exp 12/27", "pay with {v}."]
    p["pii.payment_card"] = wrap(cards, card_templates)
    ibans = [
        "DE89370400440532013000", "GB82WEST12345698765432", "FR1420041010050500013M02606",
        "ES9121000418450200051332", "IT60X0542811101000000123456", "NL91ABNA0417164300",
        "BE68539007547034", "CH9300762011623852957", "AT611904300234573201",
        "PL61109010140000071219812874", "SE4550000000058398257466", "NO9386011117947",
        "DK5000400440116243", "FI2112345600000785", "IE29AIBK93115212345678",
        "PT50000201231234567890154", "LU280019400644750000", "GR1601101250000000012300695",
        "CZ6508000000192000145399", "HU42117730161111101800000000",
    ]
    spaced = [" ".join(v[i : i + 4] for i in range(0, len(v), 4)) for v in ibans]
    mixed = [spaced[i] if i % 2 else ibans[i] for i in range(len(ibans))]
    p["pii.iban"] = wrap(mixed, ["IBAN {v}", "{v}", "pay to {v}.", "Konto: {v}"])
    ids = []
    for i in range(12):
        area = RNG.choice([a for a in range(1, 900) if a != 666])
        ssn = f"{area:03d}-{RNG.randint(1, 99):02d}-{RNG.randint(1, 9999):04d}"
        ids.append(ssn if i % 4 else ssn.replace("-", " "))
    ids += ["AB123456C", "AB 12 34 56 C", "JG103759A", "CE123456D", "PR654321B", "ZX987654A",
            "WL112233C", "HN010203D"]
    p["pii.national_id"] = wrap(ids, ["SSN {v}", "{v}", "NI number: {v}.", "id ({v})"])
    p["content.self_harm"] = [
        (t, v) for t, v in [
            ("I want to kill myself", "kill myself"), ("thinking about ending my life", "ending my life"),
            ("I just want to die", "want to die"), ("everyone is better off dead without me", "better off dead"),
            ("there is no reason to live", "no reason to live"), ("what are suicide methods", "suicide methods"),
            ("how to commit suicide", "how to commit suicide"), ("I keep hurting myself", "hurting myself"),
            ("I cut myself again", "cut myself"), ("self-harm scars", "self-harm"),
            ("Self harm helps me cope", "Self harm"), ("I want to end my life tonight", "end my life"),
            ("planning to take my own life", "take my own life"), ("i wanna die", "wanna die"),
            ("I might harm myself", "harm myself"), ("KILLING MYSELF seems easier", "KILLING MYSELF"),
            ("I don't want to be alive", "don't want to be alive"), ("I want to end it all", "end it all"),
            ("I've been cutting myself", "cutting myself"), ("I could hurt myself", "hurt myself"),
        ]
    ]
    p["content.violence"] = [
        (f"{pre} {v}{post}", v) for pre, v, post in [
            ("I'm going to", "kill him", "."), ("I will", "kill her", " tomorrow"), ("let's", "kill them", "!"),
            ("I swear I'll", "kill you", ""), ("he said he'd", "kill everyone", " there"),
            ("we should", "murder them", " all"), ("I'll", "stab them", ""), ("I want to", "murder him", ""),
            ("let's", "beat him up", " after school"), ("I'll", "beat her up", ""), ("I will", "stab him", ""),
            ("I want to", "stab her", ""), ("I'm going to", "shoot him", ""), ("", "Shoot her", " now"),
            ("planning a", "mass shooting", ""), ("a", "school shooting", " plan"), ("I'll", "make them suffer", ""),
            ("I want to", "torture him", ""), ("he's on my", "hit list", ""), ("I will", "murder her", ""),
        ]
    ]
    p["content.weapons"] = [
        (f"{pre} {v}{post}", v) for pre, v, post in [
            ("how do I", "build a bomb", "?"), ("how to", "make a bomb", " at home"), ("steps for", "making a bomb", ""),
            ("instructions for a", "pipe bomb", ""), ("how to build a", "nail bomb", ""), ("rig a", "car bomb", ""),
            ("recipe for a", "homemade explosive", ""), ("cheap", "homemade explosives", ""),
            ("make an", "improvised explosive", " device"), ("how to throw a", "molotov cocktail", ""),
            ("where to get a", "ghost gun", " kit"), ("buy an", "untraceable gun", ""), ("files for a", "3D printed gun", ""),
            ("how to", "convert to full auto", ""), ("a", "full-auto conversion", " kit"), ("drop in", "auto sear", ""),
            ("install a", "bump fire stock", ""), ("synthesize a", "nerve agent", ""), ("how to", "make napalm", ""),
            ("how to", "make thermite", " at home"),
        ]
    ]
    p["user.blocklist"] = [
        (t, v) for t, v in [
            ("status of project falcon?", "project falcon"), ("Project Falcon launch", "Project Falcon"),
            ("PROJECT  FALCON notes", "PROJECT  FALCON"), ("see acme-internal docs", "acme-internal"),
            ("ACME-INTERNAL only", "ACME-INTERNAL"), ("acme internal wiki", "acme internal"),
            ("fix TICKET-123 now", "TICKET-123"), ("TICKET-99999 blocked", "TICKET-99999"),
            ("(TICKET-4567)", "TICKET-4567"), ("TICKET-100100", "TICKET-100100"),
            ("project-falcon repo", "project-falcon"), ("about project falcon.", "project falcon"),
            ("'acme-internal'", "acme-internal"), ("ticket TICKET-321, see", "TICKET-321"),
            ("project falcon\n", "project falcon"), ("[TICKET-777]", "TICKET-777"),
            ("acme-internal/tools", "acme-internal"), ("Project falcon!", "Project falcon"),
            ("re: TICKET-8080", "TICKET-8080"), ("x project falcon y", "project falcon"),
        ]
    ]
    return p


def negatives() -> dict[str, list[str]]:
    n: dict[str, list[str]] = {}
    n["pii.email"] = [
        "icon@2x.png", "user@localhost", "@username said hi", "foo@bar", "name@123.45.67",
        "a..b@c.com", "npm i lodash@4.17.21", "@media screen and (max-width: 600px)",
        "test@domain.c", "x@-bad.com", "version@1.2.3", "sha@v1.2", "postgres://u:pw@db.host.io",
        "email at domain dot com", "logo@3x.jpg", "user(at)mail.com",
        "@@double", "name@domain.123", "me@.com", "pip install pkg@git+https",
    ]
    n["pii.phone"] = [
        "2024-01-15", "15.01.2024", "12/31/1999", "v1.2.3", "10.0.19045", "192.168.1.100",
        "12345678901", "ISBN 978-3-16-148410-0", "0.12.1", "10:45:30", "1,234,567", "+1.5%",
        "3.14159", "02134-1234", "01/02/2024", "Call 911", "Page 123-124", "build 20240115",
        "1 2 3 4 5 6 7 8", "order 123-456-7890123", "x = 5 + 3", "0044", "release 2023.10.02",
    ]
    n["pii.payment_card"] = []
    for prefix in ["4", "51", "6011", "37", "35", "4"]:
        good = luhn_complete(prefix, 16)
        bad = good[:-1] + str((int(good[-1]) + 1) % 10)
        n["pii.payment_card"] += [bad, group(bad, [4] * 4, " ")]
    n["pii.payment_card"] += [
        luhn_complete("1", 16), luhn_complete("9", 16), luhn_complete("0", 16),
        "4111-1111 1111-1111", "4111 1111 1111", "12345678901234567890123", "0000 0000 0000 0000",
        "ISBN 9780306406157", "+1 415 555 2671", "2024 0115 1030 4500",
    ]
    n["pii.iban"] = [
        "DE89370400440532013001", "GB82WEST12345698765433", "FR1420041010050500013M02607",
        "XX82WEST12345698765432", "de89370400440532013000", "DE89", "GB82 WEST", "ISO 8601",
        "DE8937040044053201300", "NL91ABNA041716430", "BE68539007547035", "CH9300762011623852958",
        "DE89 3704 0044 0532 0130 01", "AT611904300234573202", "US12345678901234567890",
        "ABCD1234EFGH5678", "NO9386011117948", "SE4550000000058398257467", "RFC 2616", "MD5 ABCDEF0123456789",
    ]
    n["pii.national_id"] = [
        "000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000", "078-05-1120",
        "123-45-6789", "12-345-6789", "123-456-789", "415-555-2671", "536221234", "536-22-12345",
        "QQ123456C", "GB123456A", "AB123456E", "AB12345C", "DA123456A", "AO123456A", "ab123456c",
        "AB 1234 56 C", "2024-01-15",
    ]
    n["content.self_harm"] = [
        "kill the process with SIGTERM", "this joke is killing me", "I'd die for a coffee",
        "the battery wants to die", "self harmonics in music", "I want to diet", "myself and I",
        "end my lifetime subscription", "cut myselfie stick", "hurt my self-esteem", "endless life",
        "the suicide squad movie", "want to dine", "killing time at the airport", "I cut my hair myself",
        "she hurt her knee", "no reason to leave", "deadline is better off",
        "harmless myself", "take my own lunch",
    ]
    n["content.violence"] = [
        "kill the process", "kill -9 1234", "skill him up", "I will kill it at the interview",
        "going to killarney", "beat the heat", "murder mystery novel", "the shooting star",
        "photo shoot with her", "hit the list", "shoot them an email",
        "a stab at the problem", "make them smile", "torture test for the disk", "kill switch",
        "I will skill up", "the killers concert", "a hitlist song",
        "mass shoots of bamboo", "school shoes",
    ]
    n["content.weapons"] = [
        "bath bomb recipe", "the movie was a bomb", "photo bomb", "build a bom file", "make a bomber jacket",
        "ghost stories", "3d printed gear", "full auto-save", "bump stock prices",
        "nerve damage", "pipe fitting",
        "car bombay trip", "homemade bread", "molotov ribbentrop pact",
        "auto search", "silencer for a generator", "make thermos coffee", "napalm death band",
        "the bomb squad", "cocktail party",
    ]
    n["user.blocklist"] = [
        "project falconry", "falcon project", "acme corporation",
        "internal acme", "TICKET-12", "TICKET-1234567", "ticket-123", "XTICKET-123", "TICKET-123X",
        "project falcons", "projects falcon", "acme-internals", "TICKET 123", "TICKET_123",
        "falcon", "project", "the acme-intern", "TICKET-", "TICKET-abc", "project  falc",
    ]
    return n
