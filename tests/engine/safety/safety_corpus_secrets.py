"""Labelled examples for the secret detectors: (text, the substring that must be found) for
positives, plain texts for negatives, near-misses included (placeholders, test-mode keys,
wrong lengths, public keys and certificates, tokens glued to other text)."""

from __future__ import annotations

from safety_samples import B32, B64, KEY_TEMPLATES, RNG, URLSAFE, b64url, jwt, letters, pem, tok, wrap


def positives() -> dict[str, list[tuple[str, str]]]:
    p: dict[str, list[tuple[str, str]]] = {}
    openai = [f"sk-proj-{tok(156, URLSAFE)}" for _ in range(8)]
    openai += [f"sk-{tok(48)}" for _ in range(6)]
    openai += [f"sk-svcacct-{tok(100, URLSAFE)}", f"sk-admin-{tok(80, URLSAFE)}"]
    openai += [f"sk-None-{tok(48)}", f"sk-{tok(32)}", f"sk-{tok(64)}", f"sk-proj-{tok(40)}"]
    p["secret.openai_key"] = wrap(openai, KEY_TEMPLATES)
    anthropic = [f"sk-ant-api03-{tok(93, URLSAFE)}AA" for _ in range(16)]
    anthropic += [f"sk-ant-admin01-{tok(93, URLSAFE)}AA" for _ in range(4)]
    p["secret.anthropic_key"] = wrap(anthropic, KEY_TEMPLATES)
    aws = [f"AKIA{tok(16, B32)}" for _ in range(14)] + [f"ASIA{tok(16, B32)}" for _ in range(6)]
    p["secret.aws_access_key"] = wrap(aws, KEY_TEMPLATES)
    secret_templates = [
        "aws_secret_access_key = {v}",
        "AWS_SECRET_ACCESS_KEY={v}",
        '"SecretAccessKey": "{v}"',
        "secretAccessKey: {v}",
        "aws_secret_key='{v}'",
        "export AWS_SECRET_ACCESS_KEY=\"{v}\"",
        "[default]\naws_access_key_id = AKIA{pad}\naws_secret_access_key={v}\n",
        "secret_access_key => {v}",
        "aws-secret-access-key: {v}",
        "AWS_SECRET_KEY := {v}",
    ]
    p["secret.aws_secret_key"] = [
        (secret_templates[i % 10].format(v=v, pad=tok(16, B32)), v)
        for i, v in enumerate(tok(40, B64) for _ in range(20))
    ]
    github = [f"ghp_{tok(36)}" for _ in range(6)] + [f"gho_{tok(36)}", f"ghu_{tok(36)}"]
    github += [f"ghs_{tok(36)}", f"ghr_{tok(36)}", f"ghs_{tok(40)}", f"ghp_{tok(36)}"]
    github += [f"github_pat_{tok(22)}_{tok(59)}" for _ in range(8)]
    p["secret.github_token"] = wrap(github, KEY_TEMPLATES)
    gitlab = [f"glpat-{tok(20, URLSAFE)}" for _ in range(16)] + [f"glpat-{tok(26)}" for _ in range(4)]
    p["secret.gitlab_token"] = wrap(gitlab, KEY_TEMPLATES)
    slack = [
        f"xox{k}-{RNG.randint(10**11, 10**12)}-{RNG.randint(10**12, 10**13)}-{tok(24)}"
        for k in "bbbbpppaarrsbpbpbpsa"
    ]
    p["secret.slack_token"] = wrap(slack, KEY_TEMPLATES)
    hooks = [
        f"https://hooks.slack.com/services/T{tok(9, B32)}/B{tok(9, B32)}/{tok(24)}"
        for _ in range(18)
    ] + [f"https://hooks.slack.com/workflows/T{tok(9, B32)}/A{tok(9, B32)}/{RNG.randint(10**17, 10**18)}/{tok(24)}" for _ in range(2)]
    p["secret.slack_webhook"] = wrap(hooks, KEY_TEMPLATES)
    stripe = [f"sk_live_{tok(24)}" for _ in range(8)] + [f"sk_live_{tok(99)}" for _ in range(4)]
    stripe += [f"rk_live_{tok(24)}" for _ in range(4)] + [f"pk_live_{tok(24)}" for _ in range(4)]
    p["secret.stripe_key"] = wrap(stripe, KEY_TEMPLATES)
    p["secret.google_api_key"] = wrap([f"AIza{tok(35, URLSAFE)}" for _ in range(20)], KEY_TEMPLATES)
    kinds = ["RSA ", "EC ", "OPENSSH ", "DSA ", "", "ENCRYPTED ", "PGP "]
    pems = []
    for i in range(20):
        kind = kinds[i % len(kinds)]
        block = pem(kind, lines=4 + i % 5, end=i % 6 != 5)
        if kind == "PGP ":
            block = block.replace("PRIVATE KEY-----", "PRIVATE KEY BLOCK-----")
        head = block.split("\n", 1)[0]
        text = [f"{block}", f"Here is the key:\n```\n{block}\n```\nthanks", f"key = '''{block}'''"][i % 3]
        pems.append((text, head))
    p["secret.private_key"] = pems
    jwts = [jwt() for _ in range(17)] + [jwt({"alg": "none"}), jwt({"typ": "JWT", "alg": "HS512", "kid": "k1"}), jwt({"enc": "A256GCM", "alg": "dir"})]
    p["secret.jwt"] = wrap(jwts, KEY_TEMPLATES[:4] + ["Authorization: Bearer {v}", "token={v}&x=1"])
    passwords = [
        ("password=Tr0ub4dor&3", "Tr0ub4dor&3"),
        ('"password": "correct horse battery staple"', "correct horse battery staple"),
        ("DB_PASSWORD='s3cr3t!x'", "s3cr3t!x"),
        ("pwd: Xy7#kd92", "Xy7#kd92"),
        ('smtpPassword = "hunter22"', "hunter22"),
        ("PGPASSWORD=Zq9pLm2x psql -h db", "Zq9pLm2x"),
        ('passphrase="blue-Orange-77"', "blue-Orange-77"),
        ("password := 'x9!kQ'", "x9!kQ"),
        ("spring.datasource.password=Secr3t!", "Secr3t!"),
        ("Password: Summer2024!", "Summer2024!"),
        ("mysql -u root --password=Hunter2x db", "Hunter2x"),
        ("password = hunter2x", "hunter2x"),
        ("pwd=abc123", "abc123"),
        ("  password: 'P@ssw0rd99'", "P@ssw0rd99"),
        ("login with user=admin password=letmein42", "letmein42"),
        ("set PASSWD=9f8e7d6c", "9f8e7d6c"),
        ("redis_password => 'Rr77!redis'", "Rr77!redis"),
        ('{"user": "bob", "password": "b0bRules"}', "b0bRules"),
        ("my password: Gx82mQ1", "Gx82mQ1"),
        ("userPassword=Kx9_2mm", "Kx9_2mm"),
    ]
    p["secret.password"] = passwords
    conns = [
        ("postgres://admin:S3cr3t@db.internal.io:5432/app", "S3cr3t"),
        ("mysql://root:hunter2@localhost/db", "hunter2"),
        ("mongodb+srv://user:p%40ss99@cluster0.abc.mongodb.net/test", "p%40ss99"),
        ("redis://:authpass123@cache:6379/0", "authpass123"),
        ("amqp://guest:guest1@rabbit:5672/", "guest1"),
        ("git clone https://user:tok3n@git.corp.org/repo.git", "tok3n"),
        ("ftp://bob:pa55@ftp.host.net/pub", "pa55"),
        ("jdbc:postgresql://u:pw123@h/db", "pw123"),
        ("DATABASE_URL=postgresql://app:Xk2mq9@10.0.0.5/app", "Xk2mq9"),
        ("url = 'mssql+pyodbc://sa:Str0ng!Pass@server/db'", "Str0ng!Pass"),
        ("rediss://default:abcDEF123@eu1.redis.cloud:6380", "abcDEF123"),
        ("connect to postgres://reader:r3ad0nly@replica/db now", "r3ad0nly"),
        ("sftp://deploy:d3pl0y!@files.host", "d3pl0y!"),
        ("http://admin:admin123@192.168.1.1/", "admin123"),
        ("ldap://cn:bindpw7@ldap.corp:389", "bindpw7"),
        ("smtp://mailer:m41l3r@smtp.host:587", "m41l3r"),
        ("CELERY_BROKER=amqp://celery:c3l3ry@mq//", "c3l3ry"),
        ("neo4j://neo:n30graph@graph:7687", "n30graph"),
        ("couchdb://couch:c0uch!@couch:5984", "c0uch!"),
        ("(postgres://svc:Svc_2024@pg.svc.cluster.local)", "Svc_2024"),
    ]
    p["secret.connection_string"] = conns
    return p


def negatives() -> dict[str, list[str]]:
    n: dict[str, list[str]] = {}
    n["secret.openai_key"] = [
        "sk-learn is a library", "risk-assessment-framework-2024-v2-final-draft-x9",
        f"sk-{tok(20)}", f"sk-{letters(40)}", f"ask-{tok(40)}", "sk-proj-short",
        f"sk_live_{tok(24)}", f"sk-ant-api03-{tok(93, URLSAFE)}AA", f"desk-{tok(40)}",
        "sk-" + "X" * 40, "sk-...", "sk-<your key here>", "sk-proj-****",
        f"task-{tok(40)}", f"sk-{tok(80)}", "sk-1234", "OPENAI_API_KEY=your-key-here",
        f"sk-proj-{letters(60)}", "tusk-elephant-walrus-narwhal-dugong-manatee-12",
        f"sk-{tok(40)}_{tok(5)}x",
    ]
    n["secret.anthropic_key"] = [
        "sk-ant-api03-short", "sk-ant-", "sk-ant-api03-" + "X" * 90, f"sk-proj-{tok(60)}",
        f"sk-ant-{tok(40)}", "ANTHROPIC_API_KEY=sk-ant-...", f"xsk-ant-api03-{tok(93)}",
        f"sk-ant-api03-{tok(20)}", "sk-ant-api03-<key>", f"sk-ant-api03-{letters(40)}",
        "sk-antelope-herd", "sk-ant-api03", f"sk-{tok(48)}", "the ant api is slow",
        f"sk-ant-api03_{tok(40)}", f"sk ant api03 {tok(40)}", "sk-ant-api03-${KEY}",
        f"sk-ant-api03-{tok(300)}", "use sk-ant-… keys", f"ask-ant-api03-{tok(40)}",
    ]
    n["secret.aws_access_key"] = [
        f"AKIA{tok(15, B32)}", f"AKIA{tok(17, B32)}", f"AKIA{tok(16, B32).lower()}",
        "AKIA0123456789018989", f"XAKIA{tok(16, B32)}", f"AIDA{tok(16, B32)}", f"AROA{tok(16, B32)}",
        f"AKID{tok(16, B32)}", "AKIA", "AKIA-XXXX-XXXX", f"akia{tok(16, B32)}",
        f"AKIA{tok(16, B32)}9", f"{tok(16, B32)}AKIA", "AKIAN wildlife", f"AKIA_{tok(16, B32)}",
        "AWS_ACCESS_KEY_ID=<your-key>", f"AKIA {tok(16, B32)}", f"ANPA{tok(16, B32)}",
        f"AKIA{tok(16, B32)}x", "AKIA1111111111111111",
    ]
    n["secret.aws_secret_key"] = [
        f"sha: {tok(40, B64)}", 'aws_secret_access_key = "${AWS_SECRET}"', f"aws_secret_access_key={tok(39, B64)}",
        f"aws_secret_access_key={tok(41, B64)}", f"aws_secret_access_key={letters(40)}",
        "aws_secret_access_key = <YOUR_SECRET_KEY>", "aws_secret_access_key: !Ref Secret",
        f"secret = {tok(40, B64)}", f"{tok(40, B64)}", "AWS_SECRET_ACCESS_KEY=", "aws_secret_access_key",
        f"aws_secret_access_key_id = {tok(40, B64)}", f"my_aws_secret_access_keys: {tok(40, B64)}",
        "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY", f"aws_access_key_id = {tok(40, B64)}",
        "AWS_SECRET_ACCESS_KEY: '{{ secrets.AWS }}'", f"secret_key = {tok(40, B64)}",
        "aws_secret_access_key = os.environ['X']", f"aws_secret_access_key=={tok(40, B64)}",
        f"session_token = {tok(40, B64)}",
    ]
    n["secret.github_token"] = [
        f"ghp_{tok(20)}", f"ghx_{tok(36)}", f"ghp_{letters(36)}", f"github_pat_{tok(20)}",
        f"xghp_{tok(36)}", "ghp_<token>", f"gh_{tok(36)}", "ghp_", f"ghp-{tok(36)}",
        f"ghp_{tok(90)}", "GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }}", f"ghp {tok(36)}",
        "ghp_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX", f"GHP_{tok(36)}", "the ghp_ prefix",
        f"ghs_{tok(35)}", f"github_pat{tok(82)}", f"mygithub_pat_{tok(82)}", "gho_token_here",
        f"ghp_{tok(36)}-suffix",
    ]
    n["secret.gitlab_token"] = [
        f"glpat-{tok(19)}", "glpat-xxxxxxxxxxxxxxxxxxxx", "glpat-<your-token>", "glpat-${TOKEN}",
        f"xglpat-{tok(20)}", f"glpat_{tok(20)}", f"GLPAT-{tok(20)}", "glpat-", f"glpat {tok(20)}",
        f"glpat-{tok(70)}", "gitlab token glpat-…", f"glptt-{tok(20)}", "glpat-aaaaaaaaaaaaaaaaaaaaaaaa",
        f"gldt-{tok(20)}", "GITLAB_TOKEN=$CI_JOB_TOKEN", f"glpat-{tok(10)}", "glpat-1234567890",
        f"aglpat-{tok(20)}", "glpat-abababababababababab", f"glpat{tok(20)}",
    ]
    n["secret.slack_token"] = [
        "xoxb-", "xoxb-123", f"xoxc-{RNG.randint(10**11, 10**12)}-{tok(24)}",
        "xoxb-your-token-here", "xoxb-XXXXXXXXXXXX-XXXXXXXXXXXXX-XXXXXXXXXXXXXXXXXXXXXXXX",
        f"xxoxb-{RNG.randint(10**11, 10**12)}-{tok(24)}", f"xoxb_{tok(40)}", "xox-token",
        f"XOXB-{RNG.randint(10**11, 10**12)}-{tok(24)}", "xoxb-1-2", "SLACK_TOKEN=${SLACK}",
        f"xoxe-{RNG.randint(10**11, 10**12)}-{tok(24)}", "xoxp", "xoxb-xoxb-xoxb",
        f"xoxb {tok(30)}", "xoxb-<token>", "xoxa-2-short", "xoxs-abc-def",
        f"xoxq-{tok(30)}", "tokens start with xoxb- or xoxp-",
    ]
    n["secret.slack_webhook"] = [
        "https://hooks.slack.com/services/", "https://slack.com/services/T123/B456/abc",
        "https://hooks.slack.com/", "https://api.slack.com/messaging/webhooks",
        "hooks.slack.com/services/T123/B456/abc", "https://hooks.slack.com/services/T123/B456/short",
        "https://hooks.slack.com/services/XXXX/YYYY/ZZZZ", "https://hooks.slack.com/apps/T12345678/abc",
        f"https://hooks.example.com/services/T{tok(9, B32)}/B{tok(9, B32)}/{tok(24)}",
        "SLACK_WEBHOOK_URL=${SLACK_WEBHOOK}", "https://hooks.slack.com/services/T00000000/B00000000/",
        "https://hooks.slack.com/services/<team>/<bot>/<secret>", "a slack hook", "hooks.slack.com",
        f"https://hooks.slack.com/services/t{tok(9, B32).lower()}/b/{tok(24)}",
        "https://hooks.slack.com/services/T1/B1/X", "https://status.slack.com/",
        "http://hooks/slack/com/services", "https://hooks.slack.com/services/TXXXXX/BXXXXX/XXXXXX",
        "https://hooks.slack.com/commands/T1234567",
    ]
    n["secret.stripe_key"] = [
        f"sk_test_{tok(24)}", f"pk_test_{tok(24)}", f"sk_live_{tok(10)}", "sk_live_XXXXXXXXXXXXXXXXXXXXXXXX",
        "sk_live_<key>", f"xsk_live_{tok(24)}", f"sk-live-{tok(24)}", f"SK_LIVE_{tok(24)}",
        "sk_live_", f"whsec_{tok(32)}", "STRIPE_KEY=${STRIPE}", f"sk_live {tok(24)}",
        f"ak_live_{tok(24)}", f"sk_live_{tok(130)}", "use sk_live_ keys in prod", f"rk_test_{tok(24)}",
        f"sk_live_{letters(30)}", f"pk_live{tok(24)}", f"ask_live_{tok(24)}", f"sk__live_{tok(24)}",
    ]
    n["secret.google_api_key"] = [
        f"AIza{tok(34, URLSAFE)}", f"AIza{tok(36, URLSAFE)}", "AIza" + "X" * 35, f"xAIza{tok(35)}",
        f"AIZA{tok(35)}", f"aiza{tok(35)}", "AIza", "AIza...", f"AIzb{tok(35)}", "GOOGLE_API_KEY=${KEY}",
        f"AIza {tok(35)}", f"AIz{tok(36)}", "AIzaSy<your-key>", f"AIza{tok(35)}_more", f"_AIza{tok(35)}",
        "the AIza prefix", f"AIza{tok(20)}", "AIzaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", f"AIza{tok(35)}Q",
        f"A1za{tok(35)}",
    ]
    n["secret.private_key"] = [
        "-----BEGIN PUBLIC KEY-----\n" + tok(64, B64) + "\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\n" + tok(64, B64) + "\n-----END CERTIFICATE-----",
        "-----BEGIN PRIVATE KEY-----\n...\n-----END PRIVATE KEY-----",
        "BEGIN PRIVATE KEY without dashes", "-----BEGIN OPENSSH PRIVATE KEY-----\n<your key here>\n-----END OPENSSH PRIVATE KEY-----",
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7" + tok(60, B64) + " user@host",
        "a PRIVATE KEY is secret", "-----BEGIN RSA PUBLIC KEY-----\n" + tok(64, B64),
        "-----BEGIN PRIVATE KEY----- blocks start PEM files.", "----BEGIN PRIVATE KEY----\n" + tok(64, B64),
        "-----BEGIN private key-----\n" + tok(64, B64), "-----BEGIN PGP PUBLIC KEY BLOCK-----\n" + tok(64, B64),
        "-----BEGIN CERTIFICATE REQUEST-----\n" + tok(64, B64), "-----END PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----\nMIIE...\n-----END PRIVATE KEY-----",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\n<redacted>\n", "-----BEGIN DH PARAMETERS-----\n" + tok(64, B64),
        "PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN X509 CRL-----\n" + tok(64, B64),
    ]
    n["secret.jwt"] = [
        f"eyJ{tok(30, URLSAFE)}.eyJ{tok(30, URLSAFE)}.{tok(20, URLSAFE)}", "eyJhbGciOiJIUzI1NiJ9",
        f"{b64url({'foo': 'bar'})}.{b64url({'a': 1})}.{tok(20)}", f"eyJ{tok(3)}.eyJ{tok(3)}.x",
        "eyJ", f"eyJ{tok(40)}", f"{b64url({'alg': 'HS256'})}", f"xeyJ{tok(30)}.eyJ{tok(30)}.{tok(20)}",
        "header.payload.signature", f"abc.{tok(40)}.{tok(40)}", "eyJ...eyJ...sig",
        f"{b64url({'alg': 'HS256'})}.{tok(30)}.{tok(30)}", "Bearer <token>", "token=${JWT}",
        f"eyJhbGciOi.eyJzdWIi.{tok(5)}", "a.b.c", f"ey{tok(40)}.ey{tok(40)}.{tok(40)}",
        f"EYJ{tok(30)}.EYJ{tok(30)}.{tok(30)}", "the eyJ prefix means JSON", f"eyJ{tok(30)} eyJ{tok(30)}",
    ]
    n["secret.password"] = [
        "password = os.environ['DB_PASSWORD']", "password=${DB_PASSWORD}", "password: <your password>",
        'password = "********"', "password=None", "password = getpass()", "password: str",
        "Password: must be at least 8 characters", "password = password", "password = self.password",
        "password_hash = 'bcrypt$2b$12$abc'", "reset your password: click the link", "if password == 'x1y2z3':",
        "password != confirm", "passwords: []", "password = input('Password: ')", "password=xxx",
        "password: '{{ vault_password }}'", "password: ''", "password=$PASS",
    ]
    n["secret.connection_string"] = [
        "postgres://user@host/db", "https://example.com:8080/path", "postgres://user:${DB_PASSWORD}@host/db",
        "postgres://user:password@host", "postgres://user:****@host", "mysql://root:<password>@localhost",
        "http://[::1]:8080/", "scheme://host:port", "user:pass@host", "ssh://git@github.com:22/repo",
        "postgres://USER:PASSWORD@HOST:PORT/DB", "redis://:@host", "http://localhost:3000",
        "see https://docs.python.org/3/library/re.html", "mongodb://localhost:27017/test",
        "postgres://u:xxx@h/db", "https://user@gitlab.com/repo.git", "ftp://anonymous@ftp.host/",
        "file:///etc/hosts", "git@github.com:org/repo.git",
    ]
    return n
