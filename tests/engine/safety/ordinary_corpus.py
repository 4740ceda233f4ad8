"""Ordinary text that holds no secret and no personal datum: the false-positive side of the
obfuscation experiment (obfuscation.py). Prose in several scripts (Cyrillic and Greek
included, which homoglyph folding must leave alone), code, numbers, dates, tables, git
SHAs, UUIDs, hex digests, and base64 or hex of harmless text. Built from a seeded RNG, so
every run sees the same texts."""

from __future__ import annotations

import base64
import hashlib
import random
import uuid

_RNG = random.Random(3535)

PROSE = [
    "The meeting moved to Thursday at 3 pm; bring the printed agenda and the budget sheet.",
    "I walked 12.5 km today, which is about 7.8 miles, and it took 2 h 14 min.",
    "Chapter 4 opens in 1912, when the ship leaves Southampton with 2,224 people aboard.",
    "Mix 250 g flour, 2 eggs and 300 ml milk; rest the batter for 30 minutes.",
    "The population grew from 1.2 million in 1990 to 3.4 million in 2020.",
    "Version 2.14.3 fixes the crash on start; 2.15.0 adds the dark theme.",
    "Our office is on the 4th floor, room 4.12, next to the kitchen.",
    "Flight BA 117 leaves at 18:45 and lands at 21:30 local time.",
    "The invoice total is 1,234.56 EUR, due by 2024-03-31.",
    "She scored 98 / 100 on the exam and 87 / 100 on the essay.",
    "The recipe serves 4 to 6 people and keeps for 3 days in the fridge.",
    "Between 2019 2020 2021 and 2022 the river flooded four times.",
    "Call me when you land, and we will drive to the lake house together.",
    "The password policy requires twelve characters and one digit.",
    "Password: must be at least 8 characters long.",
    "Set the token in your environment, never in the code.",
    "Use the secret key from the vault; do not paste it into chat.",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "1 2 3 4 5 6 7 8 9 10 11 12",
    "T H E  E N D",
    "s e e   y o u   s o o n",
    "Press Ctrl + Shift + P, then type “reload window”.",
    "Les résultats du 3e trimestre sont en hausse de 4,5 % par rapport à 2023.",
    "Die Sitzung beginnt um 9.30 Uhr im Raum 2.14; bitte pünktlich sein.",
    "Привет! Встреча перенесена на пятницу, в 10:00, кабинет 305.",
    "Скорость поезда составила 120 км/ч на участке длиной 45 км.",
    "ЕКАТЕРИНБУРГ, МОСКВА и САНКТ-ПЕТЕРБУРГ вошли в список городов.",
    "Καλημέρα σας! Η συνάντηση θα γίνει στις 5 Μαΐου στην ΑΘΗΝΑ.",
    "ΤΟ ΜΟΥΣΕΙΟ ΑΝΟΙΓΕΙ ΣΤΙΣ 9 ΚΑΙ ΚΛΕΙΝΕΙ ΣΤΙΣ 17.",
    "東京駅から新宿駅まで約１５分です。料金は２００円です。",
    "会議は２０２４年３月１５日（金）１４：００からです。",
    "ＡＢＣ株式会社の売上は前年比１２０％でした。",
    "한국어 문장입니다. 회의는 오후 3시에 시작합니다.",
    "नमस्ते, बैठक शाम 5 बजे होगी।",
    "مرحبا، الاجتماع يوم الخميس الساعة 4.",
    "Zero\u200bwidth joiners appear in some pasted web text\u200b.",
    "Emoji families use joiners: 👩\u200d👩\u200d👧 and flags 🇬🇧.",
    "Non\u00a0breaking spaces keep 10\u00a0km and 5\u00a0kg together.",
    "Prices: 1\u00a0000\u00a0€, 12\u00a0500\u00a0€ and 3\u202f200\u202f€.",
    "Call the front desk on extension 42 for towels.",
    "Ｔｈｉｓ ｉｓ ｆｕｌｌ－ｗｉｄｔｈ ｔｅｘｔ ｆｒｏｍ ａ ｆｏｒｍ．",
    "Math: 𝐱 + 𝐲 = 𝟏𝟎 and ① ② ③ are the steps.",
    "café naïve coöperate résumé São Paulo Zürich",
]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "const total = items.reduce((s, x) => s + x.price, 0);",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01' ORDER BY id LIMIT 50;",
    "password = self.password\nuser = self.user",
    "password = os.environ['DB_PASSWORD']",
    'token = getenv("API_TOKEN")',
    "export PATH=/usr/local/bin:$PATH",
    "git commit -m 'fix: handle empty input' && git push origin main",
    "docker run -p 8080:80 -v /srv/data:/data nginx:1.25",
    "curl -s https://api.github.com/repos/python/cpython | jq .stargazers_count",
    "x = 1 + 2 * 3 - 4 / 5",
    "matrix = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "ip addr add 192.168.100.200/24 dev eth0",
    "ping -c 4 255.255.255.255",
    "server 10.20.30.40:5432 max_fails=3 fail_timeout=30s;",
    "CREATE INDEX idx_orders_customer ON orders (customer_id, created_at DESC);",
    "assert parse('2024.01.15') == date(2024, 1, 15)",
    "chmod 0644 /etc/hosts && ls -la /etc | head -n 20",
    "color: #1e90ff; background: #fafafa; margin: 0 auto;",
    "npm install --save-dev typescript@5.4.5 eslint@8.57.0",
    "pip install 'numpy>=1.26,<2' 'torch==2.3.1'",
    "fn main() { let v: Vec<u32> = (0..100).collect(); println!(\"{}\", v.len()); }",
    "const user = { name: 'Ada', role: 'admin', id: 1024 };",
    "headers = {'Content-Type': 'application/json', 'Accept': 'text/plain'}",
]


def _digests(n: int) -> list[str]:
    out = []
    for i in range(n):
        data = f"commit {i} {_RNG.random()}".encode()
        sha1 = hashlib.sha1(data).hexdigest()
        out += [
            f"commit {sha1}",
            f"Merge {sha1[:7]} into main",
            f"sha256: {hashlib.sha256(data).hexdigest()}",
            f"md5 {hashlib.md5(data).hexdigest().upper()}",
            f"request id {uuid.UUID(int=_RNG.getrandbits(128), version=4)}",
            f"etag \"{hashlib.blake2b(data, digest_size=16).hexdigest()}\"",
        ]
    return out


def _numbers(n: int) -> list[str]:
    out = []
    for _ in range(n):
        y, m, d = _RNG.randint(1950, 2030), _RNG.randint(1, 12), _RNG.randint(1, 28)
        out += [
            f"{y}-{m:02d}-{d:02d}T{_RNG.randint(0, 23):02d}:{_RNG.randint(0, 59):02d}:00Z",
            f"{d:02d}.{m:02d}.{y} and {d}/{m}/{y}",
            f"order #{_RNG.randint(10**5, 10**9)} shipped, {_RNG.randint(1, 99)} items",
            f"{_RNG.randint(1, 999)},{_RNG.randint(0, 999):03d},{_RNG.randint(0, 999):03d} views",
            f"{_RNG.randint(1, 9)}.{_RNG.randint(0, 999):03d}.{_RNG.randint(0, 999):03d} inhabitants",
            f"v{_RNG.randint(0, 9)}.{_RNG.randint(0, 30)}.{_RNG.randint(0, 99)}",
            f"lat {_RNG.uniform(-90, 90):.6f}, lon {_RNG.uniform(-180, 180):.6f}",
            f"{_RNG.randint(1, 254)}.{_RNG.randint(0, 255)}.{_RNG.randint(0, 255)}.{_RNG.randint(1, 254)}",
            "\t".join(str(_RNG.randint(0, 9999)) for _ in range(6)),
            " | ".join(f"{_RNG.uniform(0, 1000):.2f}" for _ in range(5)),
            f"timestamp {_RNG.randint(10**9, 2 * 10**9)} ms {_RNG.randint(10**12, 2 * 10**12)}",
            f"ISBN 978-{_RNG.randint(0, 9)}-{_RNG.randint(100, 999)}-{_RNG.randint(10000, 99999)}-{_RNG.randint(0, 9)}",
        ]
    return out


_HARMLESS = [
    "hello world, this is a harmless sentence",
    "The quick brown fox jumps over the lazy dog.",
    '{"name": "wren", "version": "1.0.0", "private": true}',
    "meeting notes: budget approved, next review in June",
    "PNG image of a small red square",
    "user@localhost is not a real mailbox",
    "just some text to encode for the transport layer",
]


def _encoded() -> list[str]:
    out = []
    for text in _HARMLESS:
        raw = text.encode()
        out += [
            f"data: {base64.b64encode(raw).decode()}",
            f"payload={base64.urlsafe_b64encode(raw).decode().rstrip('=')}",
            f"hex {raw.hex()}",
            f"bytes {' '.join(f'{b:02x}' for b in raw[:24])}",
        ]
    for _ in range(20):
        blob = bytes(_RNG.getrandbits(8) for _ in range(_RNG.randint(12, 48)))
        out += [f"nonce {base64.b64encode(blob).decode()}", f"salt {blob.hex()}"]
    return out


def texts() -> list[str]:
    return PROSE + CODE + _digests(25) + _numbers(25) + _encoded()
